#!/usr/bin/env bash
# A reasoning model on the command line: a tiny random GGUF carrying the real Qwen3-VL Thinking
# template (qvl make-random --chat-template). With --reasoning-budget the engine closes the think
# block, so the random weights give reasoning and then an answer: qvl run --json reports both apart,
# a terminal shows the reasoning dimmed (ANSI) before the answer, a pipe gets the answer alone on
# stdout (reasoning on stderr), --hide-reasoning prints none, budget 0 none either; qvl chat too.
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
QVL=$PWD/$BUILD/qvl
E2E=$PWD/tests/fixtures/models/e2e/gguf
. tests/cli/cli.bash
M=$tmp/think.gguf
"$QVL" make-random --tiny --tokenizer-from "$E2E/e2e-Q8_0.gguf" \
  --chat-template tests/fixtures/tokenizer/qwen3vl_thinking_chat_template.jinja --out-text "$M" 2>/dev/null
check '[ -s "$M" ]' "make-random --chat-template wrote the model"
run() { timeout 60 "$QVL" run -m "$M" -p "Why is the sky blue?" -n 12 --temp 0 -t 2 "$@"; }

run --reasoning-budget 4 --json >"$tmp/j.json" 2>/dev/null
js() { node -e "const j=JSON.parse(require('fs').readFileSync('$1','utf8')); process.stdout.write(String($2))"; }
reasoning=$(js "$tmp/j.json" j.reasoning)
text=$(js "$tmp/j.json" j.text)
rtok=$(js "$tmp/j.json" j.usage.reasoning_tokens)
check '[ -n "$reasoning" ] && [ -n "$text" ]' "--json: reasoning and text apart ($(cat "$tmp/j.json" | head -c 300))"
check '[ "$rtok" -ge 5 ] && [ "$rtok" -le 7 ]' "--json: budget 4 + the forced close ($rtok reasoning tokens)"
check '! grep -q "think>" "$tmp/j.json"' "--json: no think tags in either"

run --reasoning-budget 4 >"$tmp/out" 2>"$tmp/err"
check '[ "$(cat "$tmp/out")" = "$text" ]' "a pipe: stdout is the answer alone ('$(cat "$tmp/out")' vs '$text')"
check 'grep -qF "$reasoning" "$tmp/err"' "a pipe: the reasoning is on stderr ($(cat "$tmp/err"))"
run --reasoning-budget 4 --hide-reasoning >"$tmp/out" 2>"$tmp/err"
check '[ "$(cat "$tmp/out")" = "$text" ] && ! grep -qF "$reasoning" "$tmp/err"' "--hide-reasoning prints no reasoning"

# a terminal (script gives the command a pseudo-terminal): dim on, reasoning, dim off, blank line, answer
if command -v script >/dev/null; then
  script -qec "$QVL run -m $M -p 'Why is the sky blue?' -n 12 --temp 0 -t 2 --reasoning-budget 4" /dev/null \
    >"$tmp/tty" 2>/dev/null </dev/null
  check 'node -e "
const s=require(\"fs\").readFileSync(\"$tmp/tty\",\"utf8\").replace(/\r/g,\"\"), [r,t]=process.argv.slice(1);
const i=s.indexOf(\"\x1b[2m\"), j=s.indexOf(\"\x1b[0m\");
process.exit(0<=i && i<j && s.slice(i,j).includes(r) && s.slice(j+4).startsWith(\"\n\n\"+t) ? 0 : 1)" "$reasoning" "$text"' \
    "a terminal: the reasoning dimmed, then the answer: $(od -c "$tmp/tty" | head -5)"
  script -qec "$QVL run -m $M -p 'Why is the sky blue?' -n 12 --temp 0 -t 2 --reasoning-budget 4 --hide-reasoning" \
    /dev/null >"$tmp/tty2" 2>/dev/null </dev/null
  check '! grep -q $'"'"'\x1b\[2m'"'"' "$tmp/tty2" && grep -qF "$text" "$tmp/tty2"' "a terminal with --hide-reasoning: the answer only"
else
  bad "script (util-linux) is not installed"
fi

run --reasoning-budget 0 --json >"$tmp/j0.json" 2>/dev/null
check '[ "$(js "$tmp/j0.json" "j.reasoning === \"\" && j.usage.reasoning_tokens === 0 && j.text.length > 0")" = true ]' \
  "budget 0: no reasoning ($(head -c 300 "$tmp/j0.json"))"

# qvl chat: the same flags, the answer alone in the conversation it saves
printf 'hello\n/save %s\n' "$tmp/chat.json" |
  timeout 60 "$QVL" chat -m "$M" --temp 0 -n 10 -t 2 --reasoning-budget 3 >"$tmp/chat.out" 2>"$tmp/chat.err"
check '[ "$(js "$tmp/chat.json" "j.filter(x => x.role === \"assistant\").length === 1 && !j.some(x => x.content.includes(\"think\"))")" = true ]' \
  "chat: the saved assistant turn is the answer ($(cat "$tmp/chat.json" 2>/dev/null | head -c 300))"
check '[ -s "$tmp/chat.err" ]' "chat from a pipe: the reasoning went to stderr"
summary cli-reasoning
