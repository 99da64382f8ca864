#!/usr/bin/env bash
# One option table for every command (include/qvl_options.h): every flag a command's --help lists
# parses in that command, and a flag that several commands take has the same rule in each — the same
# bad value gets the same message from run, chat, serve, bench, ... Nothing is loaded or served: each
# call ends with an unknown option, so parsing fails before any work starts.
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
QVL=$BUILD/qvl
. tests/cli/cli.bash

CMDS="run chat serve bench tokenize dump convert verify make-random loadtest"
# Flags that mean something else in one command, each with its reason (the exceptions to "same rule"):
#   --hf     dump: a switch (the case file names the directory), elsewhere REPO[:QUANT]
#   --json   loadtest: the file to write, elsewhere a switch
#   --video  bench: a switch (only the video row), run: a clip to send
EXCEPT=" --hf --json --video "

# flags CMD: the long flags `qvl CMD --help` lists, one per line.
flags() { "$QVL" "$1" --help 2>/dev/null | grep -oE '^  (-[a-z], )?--[a-z0-9-]+' | sed 's/.*--/--/' | sort -u; }

# 1. --help lists what parses: each listed flag, given a value, is taken (the call then fails on the
#    unknown option after it, not on the flag).
for c in $CMDS; do
  flags "$c" >"$tmp/$c.flags"
  n=$(wc -l <"$tmp/$c.flags")
  if [ "$n" -gt 0 ]; then ok; else bad "qvl $c --help lists no flags"; continue; fi
  while read -r f; do
    "$QVL" "$c" "$f=x" --zz-unknown >/dev/null 2>"$tmp/err"
    if grep -q "unknown option '$f" "$tmp/err"; then bad "qvl $c --help lists $f, which does not parse"; else ok; fi
  done <"$tmp/$c.flags"
done
#    and the short flags it lists
for c in run chat serve bench tokenize; do
  for s in $("$QVL" "$c" --help | grep -oE '^  -[a-z],' | tr -d ' ,'); do
    "$QVL" "$c" "$s" x --zz-unknown >/dev/null 2>"$tmp/err"
    if grep -q "unknown option '$s'" "$tmp/err"; then bad "qvl $c: $s listed but not parsed"; else ok; fi
  done
done

# 2. The same flag, the same rule: a bad value gets the same message (the command's name aside)
#    from every command that takes it.
cat "$tmp"/*.flags | sort | uniq -d >"$tmp/shared"
[ -s "$tmp/shared" ] && ok || bad "no flag is shared between commands"
while read -r f; do
  case "$EXCEPT" in *" $f "*) continue ;; esac
  for v in nonsense 5 -1 99999999999 0.001; do
    first="" first_cmd=""
    for c in $CMDS; do
      grep -qx -- "$f" "$tmp/$c.flags" || continue
      "$QVL" "$c" "$f=$v" --zz-unknown >/dev/null 2>"$tmp/err"
      msg=$(head -1 "$tmp/err" | sed "s/^qvl $c: //; s/qvl $c --help/qvl CMD --help/")
      if [ -z "$first_cmd" ]; then first=$msg first_cmd=$c
      elif [ "$msg" != "$first" ]; then bad "$f=$v: qvl $first_cmd says '$first', qvl $c says '$msg'"
      else ok; fi
    done
  done
done <"$tmp/shared"

# 3. The ranges chosen for the shared options (docs/API.md, "Options of every command").
expect() { # expect CMD ARGS... -- NEEDLE
  local needle=${*: -1}; local args=("${@:1:$#-2}")
  if "$QVL" "${args[@]}" >/dev/null 2>"$tmp/err"; then bad "qvl ${args[*]} succeeded"
  elif grep -qF -- "$needle" "$tmp/err"; then ok
  else bad "qvl ${args[*]}: '$(head -1 "$tmp/err")' lacks '$needle'"; fi
}
expect run --ctx 12 -- "ctx expects an integer in [64, 262144], got '12'"
expect chat --ctx 300000 -- "ctx expects an integer in [64, 262144], got '300000'"
expect serve --ctx 63 -- "ctx expects an integer in [64, 262144], got '63'"
expect run --threads -1 -- "threads expects an integer in [0, 1024]"
expect serve --max-tokens 0 -- "max_tokens expects an integer in [1, 262144]"
expect loadtest --temp 3 -- "temp expects a number in [0, 2], got '3'"
expect run --max-pixels 100 -- "max_pixels expects an integer in [1024, 16777216]"
expect bench --batch 1,65 -- "max_batch_size expects an integer in [1, 64], got '65'"
expect serve --precision slow -- "precision: expected exact or fast, got 'slow'"
expect convert --outtype q6_k -- "outtype: expected f32, bf16, f16, q8_0, q4_0 or q4_k"
QVL_KV_TYPE=f8 expect run -m x -p hi -- "QVL_KV_TYPE: kv_type: expected f16 or f32"

summary cli-options
