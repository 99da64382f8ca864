#!/usr/bin/env bash
# Browser tests of the web UI (web/) in headless Chromium, driven by playwright-core.
#   tests/browser/run.sh                         against the mock server (tests/browser/mock_server.mjs)
#   QVL_BROWSER_SERVER=real tests/browser/run.sh against ./qvl serve with the e2e fixture model
#   QVL_BIN=build/san/qvl                        which qvl binary the real mode starts (default ./qvl)
#   QVL_BROWSER_ONLY='regex' ...                 only the tests whose names match
# Needs: node (>= 20), npm, and Chromium at /usr/bin/chromium (Debian: apt-get install -y chromium);
# installs playwright-core from package-lock.json into tests/browser/node_modules when missing.
# Prints "browser: N passed, N failed" last; exits non-zero on any failure or missing tool.
# Screenshots and the server log go to build/browser-artifacts/.
set -u
cd "$(dirname "$0")"
suite_name=browser
. ../node_suite.bash
[ -x "${QVL_CHROMIUM:-/usr/bin/chromium}" ] || fail "no Chromium at ${QVL_CHROMIUM:-/usr/bin/chromium} (Debian: apt-get install -y chromium)"
# Installed versions must be the locked ones; otherwise (re)install from the lock file.
stale=$(node -e '
  const lock = require("./package-lock.json").packages;
  for (const [k, v] of Object.entries(lock)) {
    if (!k) continue;
    let have = null;
    try { have = require("./" + k + "/package.json").version; } catch {}
    if (have !== v.version) { console.log(k); break; }
  }')
if [ -n "$stale" ]; then
  npm ci --no-audit --no-fund --loglevel=error >&2 || fail "npm ci failed"
fi
if [ "${QVL_BROWSER_SERVER:-mock}" = real ] && [ ! -x "../../${QVL_BIN:-qvl}" ] && [ ! -x "${QVL_BIN:-/nonexistent}" ]; then
  fail "QVL_BROWSER_SERVER=real needs ${QVL_BIN:-./qvl} (run make first)"
fi
exec node run.mjs
