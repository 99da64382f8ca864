#!/usr/bin/env bash
# Every header's include guard names its file: QVL_ + its path below src/ (or apps/...) in capitals,
# / and . as _ (src/server/http/call.h: QVL_SERVER_HTTP_CALL_H), so a guard cannot outlive a move or
# a rename (issue 32 found 34 that had). A self-check first feeds it a wrong guard.
set -u
cd "$(dirname "$0")/../.."
pass=0 fail=0
want_guard() { local rel=${1#src/}; echo "QVL_$(echo "${rel%.h}" | tr 'a-z/.-' 'A-Z___')_H"; }
check_file() { # prints the file when its first #ifndef is not its guard
  local g; g=$(grep -m1 -o '^#ifndef [A-Za-z0-9_]*' "$1" | cut -d' ' -f2)
  [ "$g" = "$(want_guard "$1")" ] && grep -q "^#define $g\$" "$1" || echo "$1: guard '$g', want $(want_guard "$1")"
}
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
mkdir -p "$t/src/server/http"
printf '#ifndef QVL_SERVER_OLD_H\n#define QVL_SERVER_OLD_H\n#endif\n' >"$t/src/server/http/x.h"
if (cd "$t" && check_file src/server/http/x.h | grep -q "want QVL_SERVER_HTTP_X_H"); then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL: the self-check did not catch a wrong guard"; fi
bad=$(find src apps -name '*.h' | sort | while read -r f; do check_file "$f"; done)
if [ -z "$bad" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: include guards:"; echo "$bad" | sed 's/^/  /'; fi
echo "guards: $pass passed, $fail failed"
[ $fail -eq 0 ]
