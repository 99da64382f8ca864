#!/usr/bin/env bash
# The public library: libqvl.so exports only qvl_* symbols (-fvisibility=hidden + QVL_API), every
# function the public headers declare is exported, and examples/describe (include/qvl.h only,
# linked with libqvl.so) answers about an image exactly as `qvl run` does (greedy, same prompt).
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
E2E=tests/fixtures/models/e2e/gguf
IMG=tests/fixtures/images/scene_64x128.png
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. Exports: only qvl_*, and all of the declared API.
nm -D --defined-only "$BUILD/libqvl.so" | awk '{print $3}' | sort >"$tmp/exported"
others=$(grep -v '^qvl_' "$tmp/exported" | head -5 | tr '\n' ' ')
if [ -s "$tmp/exported" ] && [ -z "$others" ]; then ok; else bad "libqvl.so exports non-qvl symbols: $others"; fi
sed -n 's/^QVL_API .*[ *]\(qvl_[a-z0-9_]*\)(.*/\1/p' include/qvl.h include/qvl_tools.h | sort -u >"$tmp/declared"
missing=$(comm -23 "$tmp/declared" "$tmp/exported" | tr '\n' ' ')
if [ -s "$tmp/declared" ] && [ -z "$missing" ]; then ok; else bad "declared but not exported: $missing"; fi

# 2. The example is linked dynamically against libqvl.so.
if readelf -d "$BUILD/examples/describe" 2>/dev/null | grep -q 'NEEDED.*libqvl.so'; then ok; else bad "examples/describe does not link libqvl.so"; fi

# 3. It streams the answer qvl run gives (greedy, 64 tokens, the default image size bounds).
Q="What is in this picture?"
if "$BUILD/examples/describe" "$E2E/e2e-Q8_0.gguf" "$E2E/mmproj-e2e-F16.gguf" "$IMG" "$Q" >"$tmp/ex.txt" 2>"$tmp/ex.err"; then
  if "$BUILD/qvl" run -m "$E2E/e2e-Q8_0.gguf" --mmproj "$E2E/mmproj-e2e-F16.gguf" --image "$IMG" -p "$Q" --temp 0 -n 64 \
    >"$tmp/run.txt" 2>"$tmp/run.err"; then
    if [ -s "$tmp/ex.txt" ] && cmp -s "$tmp/ex.txt" "$tmp/run.txt"; then ok; else
      bad "describe printed '$(head -c 200 "$tmp/ex.txt")', qvl run '$(head -c 200 "$tmp/run.txt")'"; fi
  else
    bad "qvl run failed: $(tail -3 "$tmp/run.err")"
  fi
else
  bad "examples/describe failed: $(tail -3 "$tmp/ex.err")"
fi
# 4. Its errors come from qvl_last_error.
if "$BUILD/examples/describe" /nonexistent.gguf "$E2E/mmproj-e2e-F16.gguf" "$IMG" >/dev/null 2>"$tmp/err"; then
  bad "describe with a missing model succeeded"
elif grep -q "cannot open" "$tmp/err"; then ok; else bad "describe error: $(head -2 "$tmp/err")"; fi

echo "library: $pass passed, $fail failed"
[ $fail -eq 0 ]
