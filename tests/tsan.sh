#!/usr/bin/env bash
# Runs a test program under ThreadSanitizer (built with `make TSAN=1`): any report fails it, even
# one the program's own checks would not notice. Where the kernel's address-space randomisation
# leaves TSan no room for its shadow memory ("unexpected memory mapping"), the run is repeated
# without randomisation (setarch -R), which changes nothing else.
set -u
cd "$(dirname "$0")/.."
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
out=$("$@" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "unexpected memory mapping" <<<"$out"; then
  out=$(setarch "$(uname -m)" -R "$@" 2>&1); rc=$?
fi
printf '%s\n' "$out" | tail -60
[ $rc -eq 0 ] || echo "tsan: $* exited with $rc"
exit $rc
