#!/usr/bin/env bash
# End-to-end tests of qvl serve (tests/e2e/e2e.mjs) with the e2e fixture models and the openai npm
# client. Needs node (>= 18), npm and curl; installs the locked packages into node_modules when
# they are missing or stale. QVL_BIN picks the binary (default ./qvl, relative to the repo root);
# QVL_E2E_ONLY='regex' runs only the matching tests. Prints "e2e: N passed, N failed" last and
# exits non-zero on any failure or missing tool.
set -u
cd "$(dirname "$0")"
fail() { echo "e2e tests: $*" >&2; echo "e2e: 0 passed, 1 failed"; exit 1; }
command -v node >/dev/null || fail "node is not installed (Debian: apt-get install -y nodejs npm)"
command -v curl >/dev/null || fail "curl is not installed (Debian: apt-get install -y curl)"
bin=${QVL_BIN:-qvl}
case $bin in /*) ;; *) bin=../../$bin ;; esac
[ -x "$bin" ] || fail "no qvl binary at $bin (run make first)"
have=$(node -e 'try { console.log(require("./node_modules/openai/package.json").version) } catch { console.log("") }')
want=$(node -e 'console.log(require("./package-lock.json").packages["node_modules/openai"].version)')
if [ "$have" != "$want" ]; then
  command -v npm >/dev/null || fail "npm is not installed (Debian: apt-get install -y npm)"
  npm ci --no-audit --no-fund --loglevel=error >&2 || fail "npm ci failed"
fi
exec timeout 600 node e2e.mjs
