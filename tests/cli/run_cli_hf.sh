#!/usr/bin/env bash
# Hugging Face directories on the command line: `qvl run -m DIR` (and with --dtype q8_0) reproduces
# the reference greedy continuations of the e2e cases, `qvl convert` writes GGUFs that `qvl run`
# loads with the same result, and misuse gives clear errors. Scalar kernels (QVL_ISA=ref), so the
# greedy ids are binding.
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
QVL=$BUILD/qvl
HF=tests/fixtures/models/e2e/hf
CASES=tests/fixtures/cases/e2e
export QVL_ISA=ref
. tests/cli/cli.bash

# generated ids of a case, cut after the first EOS (qvl stops there; the fixture does not)
want_ids() {
  local ids out=""
  ids=$(case_ints "$1" generated)
  for i in $ids; do
    out="${out:+$out }$i"
    if [ "$i" = 151645 ] || [ "$i" = 151643 ]; then break; fi
  done
  echo "$out"
}

TEXT_PROMPT="What is the capital of France? Answer in one word."
check_run() { # name case.json qvl-run-args...
  local name=$1 cj=$2; shift 2
  if "$QVL" run "$@" --temp 0 -n 8 --json >"$tmp/out.json" 2>"$tmp/err"; then
    local got want
    got=$(json_ids "$tmp/out.json"); want=$(want_ids "$cj")
    if [ "$got" = "$want" ]; then ok; else bad "$name: ids [$got], reference [$want]"; fi
  else
    bad "$name failed: $(tail -3 "$tmp/err")"
  fi
}

# 1. The BF16 directory as stored, text and image.
check_run "run -m HF text_only" $CASES/bf16/text_only/case.json -m $HF -p "$TEXT_PROMPT"
cj=$CASES/bf16/one_image/case.json
check_run "run -m HF one_image" $cj -m $HF --image tests/fixtures/images/scene_64x128.png -p "Describe this image." \
  --min-pixels "$(case_int $cj min_pixels)" --max-pixels "$(case_int $cj max_pixels)"
# 2. Quantized to Q8_0 on load = the Q8_0 GGUF (the text-only case does not use the F16 mmproj).
check_run "run -m HF --dtype q8_0" $CASES/q8_0/text_only/case.json -m $HF --dtype q8_0 -p "$TEXT_PROMPT"
# 3. Converted files load and give the same continuation.
if "$QVL" convert --hf-dir $HF --outtype q8_0 --out-text "$tmp/t.gguf" --out-mmproj "$tmp/m.gguf" 2>"$tmp/err"; then
  ok
  check_run "converted q8_0" $CASES/q8_0/text_only/case.json -m "$tmp/t.gguf" --mmproj "$tmp/m.gguf" -p "$TEXT_PROMPT"
else
  bad "convert failed: $(tail -3 "$tmp/err")"
fi
if "$QVL" convert --hf-dir $HF --outtype bf16 --out-text "$tmp/b.gguf" 2>"$tmp/err"; then
  check_run "converted bf16" $CASES/bf16/text_only/case.json -m "$tmp/b.gguf" -p "$TEXT_PROMPT"
else
  bad "convert bf16 failed: $(tail -3 "$tmp/err")"
fi

# 4. Errors.
expect_error "expected f32, bf16" "$QVL" run -m $HF --dtype q6_k -p hi
expect_error "takes no --mmproj" "$QVL" run -m $HF --mmproj tests/fixtures/models/e2e/gguf/mmproj-e2e-F16.gguf -p hi
expect_error "--hf-dir DIR is required" "$QVL" convert --out-text "$tmp/x.gguf"
expect_error "--out-text and/or --out-mmproj" "$QVL" convert --hf-dir $HF
expect_error "not a directory" "$QVL" convert --hf-dir tests/fixtures/models/e2e/gguf/e2e-Q8_0.gguf --out-text "$tmp/x.gguf"
expect_error "expected f32, bf16" "$QVL" convert --hf-dir $HF --outtype q6_k --out-text "$tmp/x.gguf"
expect_error "no config.json" "$QVL" convert --hf-dir tests/fixtures/models/e2e/gguf --out-text "$tmp/x.gguf"
[ ! -e "$tmp/x.gguf" ] && ok || bad "a failed convert left a file"

summary cli-hf
