#!/usr/bin/env bash
# Golden fixture cases: `qvl dump` every case that has GGUF files, compare every stage with the
# expected values. With the scalar reference kernels (QVL_ISA=ref) the strict f32 tolerances apply;
# with the default (SIMD) kernels, quantized weight types use the fixture's llama_style tolerances,
# because the fast kernels round activations to 8-bit blocks (or bf16) like ggml does.
# Modes (GOLDEN_ISAS): ref = QVL_ISA=ref; exact = best ISA, --precision exact (today's fp32 vision
# tower); default = best ISA with the default (fast) vision tier, compared with the "fast" group of
# tests/golden/compare.c (llama_style; bf16 rounding of an F16 tower gets the README's bf16 hint).
# KV cache: ref and exact run the f32 cache (QVL_KV_TYPE=f32, so the f32 tolerances keep holding);
# default runs the product default, the F16 cache, and exact16 the best ISA with the exact vision
# tier and the F16 cache: both compare with `compare ... kv16` (the groups after text attention get
# the README's llama_style F16 hint; everything before it keeps its tolerance).
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
. tests/golden/golden.bash
# Every kernel tier this CPU has, exact vision tier (QVL_ISA=<tier>); avx2fast = the avx2 tier with the
# fast vision tier, whose F16/BF16 matrices run on int8 blocks (the fast group, as default); and the AMX kernels through
# the portable tile model in both tiers (amxsim: exact = split bf16 on F16 towers, which must keep
# the strict tolerances where they apply; amxsimfast = bf16 tiles, the fast group); on a CPU with
# AMX the same two on the hardware's tiles (amx, amxfast). amxsim512fast: the tile model with the amx
# build's AVX-512 vector code (the attention's softmax), on AVX-512 BF16 CPUs.
tiers=""
grep -qw avx2 /proc/cpuinfo 2>/dev/null && tiers="$tiers avx2 avx2fast"
grep -qw avx_vnni /proc/cpuinfo 2>/dev/null && tiers="$tiers avx2vnni"
grep -qw avx512_vnni /proc/cpuinfo 2>/dev/null && tiers="$tiers avx512"
grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null && tiers="$tiers avx512bf16 amxsim512fast"
grep -qw amx_tile /proc/cpuinfo 2>/dev/null && tiers="$tiers amx amxfast"
isas=${GOLDEN_ISAS:-"ref exact exact16 default$tiers amxsim amxsimfast"}
for case_json in tests/fixtures/cases/*/*/*/case.json; do
  id=${case_json#tests/fixtures/cases/}; id=${id%/case.json}
  wtype=$(case_str "$case_json" text_weight_type)
  if grep -q '"gguf_text": null' "$case_json"; then
    continue # HF-directory-only cases run through `qvl dump --hf` (tests/golden/run_golden_hf.sh)
  fi
  for isa in $isas; do
    mtype=$(case_str "$case_json" mmproj_weight_type)
    tol=f32
    if [ "$isa" != ref ] && [ "$wtype" != F32 ]; then tol=llama_style; fi
    # float weights are exact in every SIMD exact tier; the AMX split-bf16 products must keep it
    if { [ "$isa" = amxsim ] || [ "$isa" = amx ]; } && [ "$wtype" = F16 ]; then tol=f32; fi
    if { [ "$isa" = default ] || [ "$isa" = avx2fast ] || [ "$isa" = amxsimfast ] || [ "$isa" = amxsim512fast ] || [ "$isa" = amxfast ]; } && { [ "$wtype" != F32 ] || { [ -n "$mtype" ] && [ "$mtype" != F32 ]; }; }; then tol=fast; fi
    case $isa in
      default) env_isa=(QVL_PRECISION=fast QVL_KV_TYPE=f16) ;;
      exact) env_isa=(QVL_PRECISION=exact QVL_KV_TYPE=f32) ;;
      exact16) env_isa=(QVL_PRECISION=exact QVL_KV_TYPE=f16) ;;
      avx2fast) env_isa=(QVL_ISA=avx2 QVL_PRECISION=fast QVL_KV_TYPE=f32) ;;
      amxsimfast) env_isa=(QVL_ISA=amxsim QVL_PRECISION=fast QVL_KV_TYPE=f32) ;;
      amxsim512fast) env_isa=(QVL_ISA=amxsim512 QVL_PRECISION=fast QVL_KV_TYPE=f32) ;;
      amxfast) env_isa=(QVL_ISA=amx QVL_PRECISION=fast QVL_KV_TYPE=f32) ;;
      *) env_isa=(QVL_ISA=$isa QVL_PRECISION=exact QVL_KV_TYPE=f32) ;;
    esac
    kv=; case $isa in default|exact16) kv=kv16 ;; esac
    golden_case "$id [$isa" "qvl dump" "$case_json" "$tol" "$kv" env "${env_isa[@]}" "$QVL" dump
  done
done
echo "golden: $pass passed, $fail failed"
[ $fail -eq 0 ]
