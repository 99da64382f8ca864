# Sourced by the command-line test scripts (tests/cli/*.sh) from the repository root: the pass/fail
# counters tests/run.sh adds up, a temporary directory $tmp removed at exit (a script that sets its
# own EXIT trap removes it there), and the checks and fixture readers the scripts share.
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# check COND MESSAGE: COND (a shell condition, eval'd) passes, or MESSAGE is the failure.
check() { if eval "$1"; then ok; else bad "$2"; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# summary NAME: the "NAME: N passed, N failed" line; the status is the script's verdict.
summary() {
  echo "$1: $pass passed, $fail failed"
  [ $fail -eq 0 ]
}

# json_ids FILE: the "ids" array of qvl run --json output, space-separated (no python needed).
json_ids() { tr -d '\n\t ' <"$1" | sed -n 's/.*"ids":\[\([^]]*\)\].*/\1/p' | tr ',' ' '; }
# case_ints CASE_JSON FIELD: a case's integer array FIELD (e.g. generated), space-separated.
case_ints() { tr -d '\n\t ' <"$1" | sed -n "s/.*\"$2\":\[\([^]]*\)\].*/\1/p" | tr ',' ' '; }
# case_int CASE_JSON FIELD: a case's integer FIELD (e.g. min_pixels).
case_int() { tr -d '\n\t ' <"$1" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"; }

# expect_error NEEDLE CMD...: CMD fails, and its standard error contains NEEDLE (any case).
expect_error() {
  local needle=$1; shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then
    bad "expected failure: $*"
  elif grep -qi -- "$needle" "$tmp/err"; then
    ok
  else
    bad "'$*': message lacks '$needle': $(head -3 "$tmp/err")"
  fi
}
