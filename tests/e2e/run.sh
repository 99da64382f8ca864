#!/usr/bin/env bash
# End-to-end tests of qvl serve with the e2e fixture models and the real npm clients pinned in
# package-lock.json. Every suite (tests/e2e/*.mjs but lib.mjs) starts and stops its own servers and
# prints "NAME: N passed, N failed"; this script runs them one after another and adds them up.
# Needs node (>= 18), npm and curl; installs the locked packages into node_modules when they are
# missing or stale. QVL_BIN picks the binary (default ./qvl, relative to the repo root);
# QVL_E2E_ONLY='regex' runs only the matching tests, QVL_E2E_SUITES='regex' only matching suite
# files. Prints "e2e: N passed, N failed" last and exits non-zero on any failure or missing tool.
set -u
cd "$(dirname "$0")"
suite_name=e2e
. ../node_suite.bash
command -v curl >/dev/null || fail "curl is not installed (Debian: apt-get install -y curl)"
require_qvl_bin
npm_sync
total_pass=0 total_fail=0
for suite in *.mjs; do
  [ "$suite" = lib.mjs ] && continue
  [ -n "${QVL_E2E_SUITES:-}" ] && ! [[ $suite =~ $QVL_E2E_SUITES ]] && continue
  out=$(timeout 600 node "$suite" 2>&1 | tee /dev/stderr | tail -1)
  line=$(printf '%s\n' "$out" | grep -E ': [0-9]+ passed, [0-9]+ failed$' | tail -1)
  if [ -z "$line" ]; then
    echo "e2e: suite $suite printed no result" >&2; total_fail=$((total_fail + 1)); continue
  fi
  p=$(printf '%s' "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed$/\1/')
  f=$(printf '%s' "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed$/\2/')
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
done
echo "e2e: $total_pass passed, $total_fail failed"
[ $total_fail -eq 0 ]
