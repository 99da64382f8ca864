#!/usr/bin/env bash
# The public library: libqvl.so exports only qvl_* symbols (-fvisibility=hidden + QVL_API), every
# function qvl.h declares is exported and qvl_tools.h's are not (they are the service's), ldd shows
# none of libmicrohttpd, SQLite, libyaml, libcurl, and examples/describe (include/qvl.h only,
# linked with libqvl.so) answers about an image exactly as `qvl run` does (greedy, same prompt).
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
E2E=tests/fixtures/models/e2e/gguf
IMG=tests/fixtures/images/scene_64x128.png
. tests/cli/cli.bash

# 1. Exports: only qvl_*, and all of the declared API (qvl.h); the tools of qvl_tools.h and the
# option table of qvl_options.h are the service's (libqvl_service.a), not the library's.
nm -D --defined-only "$BUILD/libqvl.so" | awk '{print $3}' | sort >"$tmp/exported"
others=$(grep -v '^qvl_' "$tmp/exported" | head -5 | tr '\n' ' ')
if [ -s "$tmp/exported" ] && [ -z "$others" ]; then ok; else bad "libqvl.so exports non-qvl symbols: $others"; fi
decl() { sed -n 's/^QVL_API .*[ *]\(qvl_[a-z0-9_]*\)(.*/\1/p' "$@" | sort -u; }
decl include/qvl.h >"$tmp/declared"
missing=$(comm -23 "$tmp/declared" "$tmp/exported" | tr '\n' ' ')
if [ -s "$tmp/declared" ] && [ -z "$missing" ]; then ok; else bad "declared but not exported: $missing"; fi
decl include/qvl_tools.h include/qvl_options.h >"$tmp/tools"
nm --defined-only "$BUILD/libqvl_service.a" 2>/dev/null | awk 'NF == 3 && $2 == "T" {print $3}' | sort -u >"$tmp/svc"
in_lib=$(comm -12 "$tmp/tools" "$tmp/exported" | tr '\n' ' ')
not_svc=$(comm -23 "$tmp/tools" "$tmp/svc" | tr '\n' ' ')
if [ -s "$tmp/tools" ] && [ -z "$in_lib" ] && [ -z "$not_svc" ]; then ok; else
  bad "qvl_tools.h functions in libqvl.so: '$in_lib'; missing from libqvl_service.a: '$not_svc'"; fi

# 1b. The library does not pull in the service's libraries (HTTP server, SQLite, YAML, HTTP client).
needed=$(readelf -d "$BUILD/libqvl.so" 2>/dev/null | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')
svc_libs=$(ldd "$BUILD/libqvl.so" 2>/dev/null | grep -Eo 'lib(microhttpd|sqlite3|yaml|curl)[^ ]*' | sort -u | tr '\n' ' ')
if [ -n "$needed" ] && [ -z "$svc_libs" ]; then ok; else bad "libqvl.so needs the service's libraries: '$svc_libs' (NEEDED: $needed)"; fi

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

summary library
