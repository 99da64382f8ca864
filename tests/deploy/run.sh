#!/usr/bin/env bash
# Schema checks of the Kubernetes manifests in deploy/k8s (validate.mjs says what is and is not
# checked). Installs the locked npm packages (kubernetes-models, yaml) when missing or stale.
# QVL_BIN picks the binary whose `serve --help` the container args are checked against.
# Prints "deploy: N passed, N failed" last.
set -u
cd "$(dirname "$0")"
fail() { echo "deploy tests: $*" >&2; echo "deploy: 0 passed, 1 failed"; exit 1; }
command -v node >/dev/null || fail "node is not installed (Debian: apt-get install -y nodejs npm)"
bin=${QVL_BIN:-qvl}
case $bin in /*) ;; *) bin=../../$bin ;; esac
[ -x "$bin" ] || fail "no qvl binary at $bin (run make first)"
if ! cmp -s <(node -e 'const l=require("./package-lock.json").packages; delete l[""]; console.log(JSON.stringify(Object.keys(l).sort().map(k=>[k,l[k].version])))' 2>/dev/null) \
           <(node -e 'const l=require("./node_modules/.package-lock.json").packages; console.log(JSON.stringify(Object.keys(l).sort().map(k=>[k,l[k].version])))' 2>/dev/null); then
  command -v npm >/dev/null || fail "npm is not installed (Debian: apt-get install -y npm)"
  npm ci --no-audit --no-fund --loglevel=error --engine-strict=false >&2 || fail "npm ci failed"
fi
QVL_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin") exec node validate.mjs
