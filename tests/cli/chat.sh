#!/usr/bin/env bash
# qvl chat in a pseudo-terminal (tmux): two turns with an image, an answer stopped with Ctrl-C
# mid-way (the chat goes on), a third turn, line-editing history (Up), /stats showing the prefix
# cache reused across turns, /save, Ctrl-D leaving; and the same chat fed from a pipe.
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
QVL=$PWD/$BUILD/qvl
E2E=$PWD/tests/fixtures/models/e2e/gguf
IMG=$PWD/tests/fixtures/images/rgb_333x250.png
. tests/cli/cli.bash
sess=qvl-chat-test-$$
# tm ARGS: tmux on a server of this test's own (-L), with no user's tmux.conf: its options and
# sessions touch nobody else's
tm() { tmux -L "$sess" -f /dev/null "$@"; }
sock=
trap 'tm kill-server 2>/dev/null; [ -n "$sock" ] && rm -f "$sock"; rm -rf "$tmp"' EXIT

# ---- piped standard input: no terminal, one message per line, answers on stdout ----------------
# piped_chat NAME [ARGS...]: standard input to qvl chat with the e2e model and projector (greedy, 8
# tokens) and ARGS; its standard output to $tmp/NAME.out, standard error to $tmp/NAME.err.
piped_chat() {
  local name=$1
  shift
  timeout 120 "$QVL" chat -m "$E2E/e2e-Q8_0.gguf" --mmproj "$E2E/mmproj-e2e-F16.gguf" --temp 0 -n 8 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
}
printf '/image %s\nwhat is in this picture?\nand the colours?\n/stats\n/save %s\n' "$IMG" "$tmp/piped.json" | piped_chat piped
rc=$?
check '[ $rc -eq 0 ]' "piped chat exits 0 at the end of input (rc $rc): $(tail -3 "$tmp/piped.err")"
check 'grep -q "^turns 2 " "$tmp/piped.out"' "piped: /stats counts 2 turns: $(cat "$tmp/piped.out")"
check 'grep -Eq "prefix cache hits [1-9]" "$tmp/piped.out"' "piped: the second turn reused the first one's KV"
check 'grep -q "\"image_url\"" "$tmp/piped.json" && [ $(grep -c "\"role\":" "$tmp/piped.json") -eq 4 ]' "piped: /save wrote 2 user + 2 assistant messages"
# inlined FILE MIME: the first data: URL of that type in FILE, decoded (a server reads no local paths,
# so /save writes the attached files as data: URLs, which it takes back as they are)
inlined() { grep -o "\"url\":[[:space:]]*\"data:$2;base64,[^\"]*\"" "$1" | head -1 | sed 's/.*base64,//; s/"$//' | base64 -d; }
check 'inlined "$tmp/piped.json" image/png | cmp -s - "$IMG"' "piped: /save inlines the image as a data: URL: $(grep -m1 '"url"' "$tmp/piped.json" | head -c 120)"
check '! grep -q "> " "$tmp/piped.err"' "piped: no prompt without a terminal"
# a video (issue 23): attached with /video, asked about twice; the follow-up encodes nothing (the
# first turn's KV, video rows included, comes from the prefix cache): one vision encode in all
VID=$PWD/tests/fixtures/videos/clip_96x64_10f_5fps.mkv
printf '/video %s\nwhat happens in this clip?\nand at the end?\n/stats\n/save %s\n' "$VID" "$tmp/video.json" | piped_chat video
rc=$?
check '[ $rc -eq 0 ] && grep -q "^turns 2 " "$tmp/video.out"' "video chat: 2 turns (rc $rc): $(tail -3 "$tmp/video.err")"
check 'grep -q "image cache hits 0, misses 1" "$tmp/video.out"' "video chat: one encode for two turns: $(grep turns "$tmp/video.out")"
check 'grep -q "\"video_url\"" "$tmp/video.json" && inlined "$tmp/video.json" "video/[a-z-]*" | cmp -s - "$VID"' \
  "video chat: /save keeps the video part, inlined: $(grep -m1 '"url"' "$tmp/video.json" | head -c 120)"
check 'grep -q "video 1 attached" "$tmp/video.err"' "video chat: /video is acknowledged"
# the same clip from the command line (--video, which --help lists beside --image)
printf 'what happens in this clip?\n/stats\n/save %s\n' "$tmp/video-arg.json" | piped_chat video-arg --video "$VID"
rc=$?
check '[ $rc -eq 0 ] && grep -q "image cache hits 0, misses 1" "$tmp/video-arg.out" && grep -q "\"video_url\"" "$tmp/video-arg.json"' \
  "chat --video: the clip goes with the first message (rc $rc): $(grep turns "$tmp/video-arg.out") $(tail -2 "$tmp/video-arg.err")"
check '"$QVL" chat --help 2>&1 | grep -q -- "^  --video FILE"' "qvl chat --help lists --video"
echo "" | timeout 60 "$QVL" chat -m "$E2E/e2e-Q8_0.gguf" --mmproj "$E2E/mmproj-e2e-F16.gguf" --image /nonexistent.png >/dev/null 2>"$tmp/err2"
rc=$?
check '[ $rc -eq 2 ] && grep -q "/nonexistent.png: No such file" "$tmp/err2"' "a missing --image is reported (rc $rc): $(cat "$tmp/err2")"
echo "" | timeout 60 "$QVL" chat -m "$E2E/e2e-Q8_0.gguf" --image "$IMG" >/dev/null 2>"$tmp/err3"
check 'grep -q "vision projector" "$tmp/err3"' "an image without --mmproj is reported: $(cat "$tmp/err3")"

# ---- a terminal ------------------------------------------------------------------------------
if ! command -v tmux >/dev/null; then
  bad "tmux is not installed (tools/install-deps.sh --test)"
  summary cli-chat
  exit 1
fi
# pane: the screen and its history as text; -J joins the lines the terminal wrapped at column 160
# (an answer's "[stopped]" may straddle the edge), and the trailing blanks -J keeps are dropped
pane() { tm capture-pane -p -J -t "$sess" -S -2000 2>/dev/null | sed 's/ *$//'; }
# wait_for REGEX [SECONDS]: until the pane shows it
wait_for() {
  local end=$((SECONDS + ${2:-60}))
  while [ $SECONDS -lt $end ]; do
    pane | grep -Eq -- "$1" && return 0
    sleep 0.2
  done
  return 1
}
# wait_until CMD [SECONDS]: until CMD succeeds
wait_until() {
  local end=$((SECONDS + ${2:-60}))
  while [ $SECONDS -lt $end ]; do
    "$1" && return 0
    sleep 0.2
  done
  return 1
}
count() { pane | grep -Ec -- "$1"; }
last_line() { pane | grep -v '^$' | tail -1; }
# wait_idle: the answer is done when the last line is an empty prompt ("> ", its blank trimmed)
wait_idle() {
  local end=$((SECONDS + ${1:-60}))
  sleep 0.3
  while [ $SECONDS -lt $end ]; do
    [ "$(last_line)" = ">" ] && return 0
    sleep 0.2
  done
  return 1
}
# The pane runs a shell that reports how qvl chat ended and then keeps the pane open. Ctrl-C goes
# to the whole foreground process group, that shell included: dash (the usual /bin/sh) then ended
# as soon as qvl chat did and took the pane along, so the shell ignores it (`trap '' INT`; qvl chat
# sets its own handler over the ignored disposition it inherits). The words go to tmux one by one,
# so no other shell parses the paths. (tmux's own #{pane_dead_status} was tried instead of the echo:
# its server now and then never reaped the exited qvl chat.)
tm new-session -d -s "$sess" -x 160 -y 50 \
  sh -c 'trap "" INT; "$@"; echo CHAT-EXITED-$?; sleep 30' sh \
  "$QVL" chat -m "$E2E/e2e-Q8_0.gguf" --mmproj "$E2E/mmproj-e2e-F16.gguf" --temp 0 -n 8 --ctx 32768
sock=$(tm display-message -p '#{socket_path}') # kill-server leaves the socket file behind
check 'wait_for "Ctrl-D to leave" 60' "the banner: $(pane | tail -5)"
tm send-keys -t "$sess" "/image $IMG" Enter
check 'wait_for "image 1 attached" 10' "/image acknowledged"
tm send-keys -t "$sess" "what is in this picture?" Enter
check 'wait_idle 60' "first answer: $(pane | tail -4)"
tm send-keys -t "$sess" "and the colours?" Enter
check 'wait_idle 60' "second answer: $(pane | tail -4)"
# a long answer, stopped mid-way: the tiny model writes thousands of tokens a second on an idle
# machine, so the answer may run to 30,000 tokens and Ctrl-C goes as soon as it has started
tm send-keys -t "$sess" "/tokens 30000" Enter
sleep 0.3
tm send-keys -t "$sess" "tell me a very long story" Enter
check 'wait_for "^> tell me a very long story" 10' "the long question is sent"
# Ctrl-C once the answer is being written: sent earlier, on a busy machine it could reach the
# prompt before the line was read, and a Ctrl-C at the prompt only clears the line
answering() { pane | sed -n '/^> tell me a very long story$/,$p' | tail -n +2 | grep -q .; }
check 'wait_until answering 20' "the long answer starts: $(pane | tail -4)"
tm send-keys -t "$sess" C-c
check 'wait_for "\[stopped\]" 20' "Ctrl-C stops the answer: $(pane | tail -4)"
check '! pane | grep -q CHAT-EXITED' "and the chat is still running: $(pane | tail -3)"
tm send-keys -t "$sess" "/tokens 8" Enter
sleep 0.3
tm send-keys -t "$sess" "a third question" Enter
check 'wait_idle 60 && pane | grep -q "^> a third question"' "third turn answered: $(pane | tail -4)"
tm send-keys -t "$sess" "/stats" Enter
check 'wait_for "^turns 4 " 10' "/stats counts four turns (the stopped one too): $(pane | tail -5)"
check 'pane | grep -Eq "prefix cache hits [1-9]"' "/stats shows a prefix-cache hit: $(pane | grep 'prefix cache')"
check 'pane | grep -Eq "image cache hits|misses 1"' "/stats reports the image cache"
# line editing: Up brings back the last line
tm send-keys -t "$sess" Up
sleep 0.5
check '[ "$(last_line)" = "> /stats" ]' "Up recalls the previous line: $(last_line)"
tm send-keys -t "$sess" C-u "/save $tmp/tty.json" Enter
check 'wait_for "saved 8 messages" 10' "/save from the terminal: $(pane | tail -3)"
tm send-keys -t "$sess" "/reset" Enter
check 'wait_for "new conversation" 10' "/reset"
tm send-keys -t "$sess" C-d
check 'wait_for "CHAT-EXITED-0" 20' "Ctrl-D leaves with status 0: $(pane | tail -3)"
summary cli-chat
