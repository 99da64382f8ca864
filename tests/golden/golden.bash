# Sourced by run_golden.sh and run_golden_hf.sh from the repository root: the counters, a temporary
# directory for the dumps, and one dump-and-compare step.
QVL=$BUILD/qvl
CMP=$BUILD/tests/golden/compare
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0 fail=0

# case_str CASE_JSON FIELD: a case's string FIELD (e.g. text_weight_type).
case_str() { sed -n "s/.*\"$2\": \"\([^\"]*\)\".*/\1/p" "$1" | head -1; }

# golden_case LABEL WHAT CASE_JSON TOL KV CMD...: dumps the case with `CMD... CASE_JSON DUMP` (WHAT
# names that command in a failure), then compares every stage of DUMP with the case's expected values
# in tolerance group TOL (KV: kv16 for the F16 cache's hints, or empty) and counts a pass or a fail;
# a fail is reported as "FAIL LABEL...]".
golden_case() {
  local label=$1 what=$2 case_json=$3 tol=$4 kv=$5; shift 5
  local dump
  dump="$out/$(echo "$label" | tr -c 'A-Za-z0-9_.-' _).safetensors"
  if ! "$@" "$case_json" "$dump" >"$out/log" 2>&1; then
    echo "FAIL $label]: $what failed"; sed 's/^/    /' "$out/log" | tail -5
    fail=$((fail + 1)); return
  fi
  if "$CMP" "$case_json" "$dump" "$tol" ${kv:+"$kv"} >"$out/cmp" 2>&1; then
    pass=$((pass + 1))
  else
    echo "FAIL $label, $tol${kv:+, f16 KV}]"; grep -E 'FAIL|error' "$out/cmp" | sed 's/^/    /' | head -12
    fail=$((fail + 1))
  fi
}
