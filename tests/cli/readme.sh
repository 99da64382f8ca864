#!/usr/bin/env bash
# README.md's "Without a download" works as written: the SERVE_ARGS of its `make serve` line start
# qvl serve on the fixture models, the page answers, and its curl example, run as printed (only the
# port changed), gets an answer from the model id it names. A renamed flag, fixture file or model id
# fails here, as does a flag of any `qvl CMD` example in the docs that CMD no longer takes.
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
QVL=$PWD/$BUILD/qvl
. tests/cli/cli.bash
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT

section=$(sed -n '/^## Without a download$/,/^## /p' README.md)
check '[ -n "$section" ]' 'README.md has no "## Without a download" section'
args=$(printf '%s\n' "$section" | sed -n "s/^    make serve SERVE_ARGS='\(-m tests\/fixtures\/[^']*\)'$/\1/p")
check '[ -n "$args" ]' "no \"make serve SERVE_ARGS='-m tests/fixtures/...'\" line in the section"
# the curl example: from its first line to the one that closes the quoted body, joined
example=$(printf '%s\n' "$section" | sed -n '/^    curl -s localhost:8080/,/'"'"'$/p' | sed 's/^ *//' | tr '\n' ' ')
check '[ -n "$example" ]' "no curl example in the section"

if [ -n "$args" ] && [ -n "$example" ]; then
  # shellcheck disable=SC2086 # the README's arguments, split as make's shell would
  "$QVL" serve $args --host 127.0.0.1 --port 0 >"$tmp/serve.log" 2>&1 &
  srv=$!
  port=
  for _ in $(seq 300); do
    grep -q "ready: model" "$tmp/serve.log" && port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/serve.log" | head -1)
    [ -n "$port" ] && break
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.2
  done
  check '[ -n "$port" ]' "qvl serve $args did not start: $(tail -3 "$tmp/serve.log")"
  if [ -n "$port" ]; then
    check 'curl -sf "http://127.0.0.1:$port/" | grep -qi "<html"' "the page is not served at /"
    eval "${example//localhost:8080/127.0.0.1:$port}" >"$tmp/answer.json" 2>"$tmp/curl.err"
    check 'grep -q "\"finish_reason\"" "$tmp/answer.json"' "the README's curl example got no answer: $(head -c 300 "$tmp/answer.json") $(cat "$tmp/curl.err")"
    id=$(printf '%s' "$example" | sed -n 's/.*"model":"\([^"]*\)".*/\1/p')
    check '[ -n "$id" ] && grep -q "\"model\":\"$id\"" "$tmp/answer.json"' "the README's model id '$id' is not the served model's: $(head -c 300 "$tmp/answer.json")"
    check 'curl -s "http://127.0.0.1:$port/v1/models" | grep -q "\"id\":\"$id\""' "/v1/models does not list '$id'"
  fi
fi

# Every flag of a `qvl CMD ...` example line in README.md and docs/*.md is one that `qvl CMD --help`
# lists (comments after '#' are not the command): a renamed or removed flag fails here.
cmds=" run chat serve bench tokenize dump convert verify make-random loadtest "
n_examples=0
for f in README.md docs/*.md; do
  while IFS= read -r l; do
    cmd=$(printf '%s' "$l" | sed -E 's/^[0-9]+:[[:space:]]*(\.\/)?qvl ([a-z-]+).*/\2/')
    case $cmds in *" $cmd "*) ;; *) continue ;; esac
    n_examples=$((n_examples + 1))
    help=$("$QVL" "$cmd" --help 2>&1)
    for fl in $(printf '%s' "${l#*:}" | sed 's/#.*//' | grep -oE '(^|[[:space:]])--[a-z0-9-]+' | tr -d ' \t'); do
      check 'printf "%s\n" "$help" | grep -qE -- "^  (-[a-zA-Z], )?$fl( |\$)"' "$f:${l%%:*}: qvl $cmd has no $fl (qvl $cmd --help)"
    done
  done < <(grep -nE '^[[:space:]]*(\./)?qvl [a-z-]+ ' "$f")
done
check '[ $n_examples -ge 20 ]' "only $n_examples qvl command lines found in the docs"

summary cli-readme
