#!/usr/bin/env bash
# Runs every test program and fuzz corpus replay of a build, then prints one total line.
# Each test prints "name: N passed, N failed"; this script adds them up.
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/.."
total_pass=0 total_fail=0 broken=0
run() {
  local out rc
  out=$("$@" 2>&1); rc=$?
  local line
  line=$(printf '%s\n' "$out" | grep -E ': [0-9]+ passed, [0-9]+ failed$' | tail -1)
  if [ -z "$line" ] || [ $rc -ne 0 ]; then
    printf '%s\n' "$out" | tail -40
  fi
  if [ -n "$line" ]; then
    local p f
    p=$(printf '%s' "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed$/\1/')
    f=$(printf '%s' "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed$/\2/')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    echo "  $line"
  fi
  if [ $rc -ne 0 ] && { [ -z "$line" ] || [ "${f:-0}" = 0 ]; }; then
    echo "  $* exited with $rc"; broken=$((broken + 1)); total_fail=$((total_fail + 1))
  fi
}
for t in "$BUILD"/tests/unit/* "$BUILD"/tests/kernels/*; do
  [ -x "$t" ] && run "$t"
done
for r in "$BUILD"/fuzz/*-replay; do
  [ -x "$r" ] || continue
  name=$(basename "$r" -replay); name=${name#fuzz_}
  [ -d tests/fuzz/corpus/$name ] && run "$r" tests/fuzz/corpus/$name
done
for g in tests/golden/*.sh tests/cli/*.sh tests/layout/*.sh; do
  [ -x "$g" ] && run env BUILD="$BUILD" "$g"
done
# qvl serve end to end (node + the openai npm client; starts and stops its own servers)
[ -x tests/e2e/run.sh ] && [ "${QVL_E2E:-1}" != 0 ] && run env QVL_BIN="$BUILD/qvl" tests/e2e/run.sh
# deploy/k8s against the Kubernetes schemas (node + the kubernetes-models npm package)
[ -x tests/deploy/run.sh ] && [ "${QVL_E2E:-1}" != 0 ] && run env QVL_BIN="$BUILD/qvl" tests/deploy/run.sh
# the web UI in headless Chromium against a real qvl serve with the e2e fixture model
# (QVL_BROWSER=0 skips it on machines without chromium)
[ -x tests/browser/run.sh ] && [ "${QVL_BROWSER:-1}" != 0 ] && run env QVL_BROWSER_SERVER=real QVL_BIN="$BUILD/qvl" tests/browser/run.sh
echo "total: $total_pass passed, $total_fail failed"
[ $total_fail -eq 0 ]
