# Sourced by the run.sh of the node-driven suites (tests/e2e, tests/deploy, tests/browser), in the
# suite's own directory, after setting suite_name=NAME: fail, and the checks they make before starting node.

# fail MESSAGE: says why the suite cannot run, prints the "NAME: 0 passed, 1 failed" line that
# tests/run.sh adds up, and exits 1.
fail() { echo "$suite_name tests: $*" >&2; echo "$suite_name: 0 passed, 1 failed"; exit 1; }

command -v node >/dev/null || fail "node is not installed (Debian: apt-get install -y nodejs npm)"

# require_qvl_bin: sets bin to $QVL_BIN (default qvl; relative to the repository root unless
# absolute) as seen from here, and fails when it is not an executable.
require_qvl_bin() {
  bin=${QVL_BIN:-qvl}
  case $bin in /*) ;; *) bin=../../$bin ;; esac
  [ -x "$bin" ] || fail "no qvl binary at $bin (run make first)"
}

# npm_sync [NPM_CI_ARG...]: node_modules is current when npm's own record of the install matches
# the lock file; otherwise npm ci installs the locked packages.
npm_sync() {
  local lock='const l=require("./package-lock.json").packages; delete l[""]; console.log(JSON.stringify(Object.keys(l).sort().map(k=>[k,l[k].version])))'
  local have='const l=require("./node_modules/.package-lock.json").packages; console.log(JSON.stringify(Object.keys(l).sort().map(k=>[k,l[k].version])))'
  if ! cmp -s <(node -e "$lock" 2>/dev/null) <(node -e "$have" 2>/dev/null); then
    command -v npm >/dev/null || fail "npm is not installed (Debian: apt-get install -y npm)"
    npm ci --no-audit --no-fund --loglevel=error "$@" >&2 || fail "npm ci failed"
  fi
}
