#!/usr/bin/env bash
# No #include points up the layer order: every `#include "LAYER/..."` in src/ and apps/ must name the
# file's own layer or one below it in tests/layout/layers.txt. Fails naming each offending line. A
# self-check first feeds the same checker an up-pointing include and expects it to be caught.
# SRC_ROOT overrides the tree checked (default: the repository).
set -u
cd "$(dirname "$0")/../.."
root=${SRC_ROOT:-.}
layers=$PWD/tests/layout/layers.txt
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
[ -f "$layers" ] || { echo "includes: 0 passed, 1 failed (no $layers)"; exit 1; }

# check: reads "path:line:#include "x/y.h"" lines on stdin, prints one line per violation.
check() {
  awk -v layers="$layers" -v shown="tests/layout/layers.txt" '
    BEGIN {
      while ((getline l < layers) > 0) {
        sub(/#.*/, "", l); if (l !~ /:/) continue
        split(l, kv, ":"); name = kv[1]; gsub(/[ \t]/, "", name)
        known[name] = 1; below[name] = kv[2]
      }
      for (n in known) { delete seen; reach(n, n) }
    }
    # ok[a, b]: a file of layer a may include layer b
    function reach(from, at,   m, i, ws) {
      ok[from, at] = 1
      m = split(below[at], ws, " ")
      for (i = 1; i <= m; i++) if (!((from, ws[i]) in ok)) reach(from, ws[i])
    }
    {
      path = $0; sub(/:.*/, "", path)
      n = split(path, p, "/")
      layer = p[1] == "src" ? p[2] : p[1]
      inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
      if (inc !~ /\//) next          # same directory
      split(inc, q, "/"); target = q[1]
      if (!(target in known)) next   # not a layer (system or generated header)
      if (!(layer in known)) { print path ": layer \"" layer "\" is not in " shown; next }
      if (!((layer, target) in ok)) print $0 "  (" layer " may not include " target ")"
    }'
}

# 1. The checker catches an include pointing up (and passes a downward one).
got=$(printf '%s\n' 'src/base/x.c:3:#include "engine/engine.h"' 'src/engine/y.c:4:#include "base/buf.h"' \
  'src/vision/z.c:5:#include "text/decoder.h"' | check)
if [ "$(printf '%s\n' "$got" | grep -c .)" = 2 ] && printf '%s' "$got" | grep -q 'base may not include engine' &&
  printf '%s' "$got" | grep -q 'vision may not include text'; then ok; else bad "self-check: the checker said '$got'"; fi

# 2. Every directory of src/ is a layer.
for d in "$root"/src/*/; do
  d=$(basename "$d")
  grep -Eq "^$d:" "$layers" || bad "src/$d is not in tests/layout/layers.txt"
done
[ $fail -eq 0 ] && ok

# 3. The tree.
out=$(cd "$root" && grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' --include='*.c' --include='*.h' src apps | check)
if [ -z "$out" ]; then ok; else bad "includes pointing up the layer order:"; printf '%s\n' "$out" | sed 's/^/  /'; fi

echo "includes: $pass passed, $fail failed"
[ $fail -eq 0 ]
