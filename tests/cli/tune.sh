#!/usr/bin/env bash
# `qvl tune` and the tuning file in the cache folder (docs/KERNELS.md "Tuning"): on a tier without
# a choice of kernels it says so; on the amxsim test tier (the AMX kernels through the tile model
# over AVX-512, made to tune with QVL_TUNE=always) it measures the Q8_0 shapes of a model against
# every x86 tier below, prints each candidate's rate and writes the file keyed by the CPU into $QVL_CACHE/tuning/, which a later
# `qvl bench` reads instead of measuring; a damaged file is ignored with a warning.
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
. tests/cli/cli.bash
Q=$BUILD/qvl
M=tests/fixtures/models/micro-b/gguf
export QVL_CACHE=$tmp/cache

QVL_ISA=ref "$Q" tune -m $M/micro-b-Q8_0.gguf >"$tmp/out" 2>"$tmp/err"
check '[ $? -eq 0 ] && grep -q "no operation offers a choice" "$tmp/out"' "tune on ref: $(cat "$tmp/out" "$tmp/err" | head -3)"
expect_error "-m MODEL.gguf is required" "$Q" tune

if ! grep -qw avx512_bf16 /proc/cpuinfo; then
  echo "  amxsim tuning: skipped (no AVX-512 BF16 here)"
else
  QVL_ISA=amxsim QVL_TUNE=always "$Q" tune -m $M/micro-b-Q8_0.gguf --mmproj $M/mmproj-micro-b-Q8_0.gguf -t 2 \
    >"$tmp/out" 2>"$tmp/err"
  check '[ $? -eq 0 ]' "tune on amxsim failed: $(head -3 "$tmp/err")"
  check 'grep -q "^tuning (isa amxsim, 2 threads, file $QVL_CACHE/tuning/kernels-" "$tmp/out"' \
    "table header: $(head -2 "$tmp/out")"
  # rows: Q8_0, every class, the x86 tiers from avx2 up with their rates; the tiles from 4 tokens,
  # never for 1-3
  rows=$(grep -c "^  Q8_0 .* tokens .*GOP/s: avx2 [0-9]*, .*avx512 [0-9]*, amx (tile model) [0-9]*$" "$tmp/out")
  check '[ "$rows" -ge 2 ] && grep -q "^  Q8_0 .*1-3 tokens .*GOP/s: avx2 [0-9]*, " "$tmp/out" &&
    ! grep "1-3 tokens" "$tmp/out" | grep -q amx' "rows: $(cat "$tmp/out")"
  f=$(ls "$QVL_CACHE"/tuning/kernels-*.tune 2>/dev/null | head -1)
  check '[ -n "$f" ] && head -2 "$f" | grep -q "^key .*|amxsim|2 threads|"' "tuning file: $f"
  # a later start reads the file: the rows are marked as from the file
  QVL_ISA=amxsim QVL_TUNE=always "$Q" bench -m $M/micro-b-Q8_0.gguf -t 2 --prefill 8 --decode 2 --batch 1 \
    --batch-steps 2 --skip-vision --no-constrained >"$tmp/bench" 2>"$tmp/err"
  check '[ $? -eq 0 ] && grep -q "(from the file)" "$tmp/bench" && ! grep -q "GOP/s: .*[0-9]$" "$tmp/bench"' \
    "bench reuses the file: $(grep -A4 "^tuning" "$tmp/bench")"
  echo "garbage" >"$f"
  QVL_ISA=amxsim QVL_TUNE=always "$Q" bench -m $M/micro-b-Q8_0.gguf -t 2 --prefill 8 --decode 2 --batch 1 \
    --batch-steps 2 --skip-vision --no-constrained >"$tmp/bench" 2>"$tmp/err"
  check '[ $? -eq 0 ] && grep -q "is damaged; ignoring it" "$tmp/err" && head -1 "$f" | grep -q "^qvl kernel tuning 1$"' \
    "a damaged file: $(grep -i tuning "$tmp/err" | head -2)"
fi
summary tune
