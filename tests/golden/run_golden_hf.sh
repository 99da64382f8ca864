#!/usr/bin/env bash
# Golden fixture cases from Hugging Face directories: `qvl dump --hf` every case whose case.json
# names an hf_dir, compare every stage with the expected values (tests/golden/compare), as
# run_golden.sh does for the GGUF files. With the scalar reference kernels (QVL_ISA=ref) the strict
# f32 tolerances apply, for BF16 checkpoints too: the expected values of a BF16 directory are those
# of its bf16 weights, and exact float32 compute on them meets f32. With the default (SIMD)
# kernels, non-F32 weights use the llama_style tolerances (the fast kernels round activations like
# ggml), the rule of run_golden.sh. KV cache as there: ref with the f32 cache, default with the F16
# cache (compare ... kv16).
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
. tests/golden/golden.bash
isas=${GOLDEN_ISAS:-"ref default"}
for case_json in tests/fixtures/cases/*/*/*/case.json; do
  id=${case_json#tests/fixtures/cases/}; id=${id%/case.json}
  if grep -q '"hf_dir": null' "$case_json" || ! grep -q '"hf_dir"' "$case_json"; then
    continue
  fi
  wtype=$(case_str "$case_json" text_weight_type)
  for isa in $isas; do
    tol=f32
    if [ "$isa" != ref ] && [ "$wtype" != F32 ]; then tol=llama_style; fi
    kv=
    if [ "$isa" = default ]; then env_isa=(QVL_KV_TYPE=f16); kv=kv16; else env_isa=(QVL_ISA=$isa QVL_KV_TYPE=f32); fi
    golden_case "$id [hf, $isa" "qvl dump --hf" "$case_json" "$tol" "$kv" env "${env_isa[@]}" "$QVL" dump --hf
  done
done
echo "golden-hf: $pass passed, $fail failed"
[ $fail -eq 0 ]
