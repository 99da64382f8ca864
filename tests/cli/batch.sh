#!/usr/bin/env bash
# qvl batch (issue 34 item 4) on the e2e fixture model: a folder of images and videos (in
# subfolders too) becomes one JSON line per input, each answer the one `qvl run` gives for that
# input alone (greedy); a second run does nothing; after a crash (lines lost, a half-written last
# line) it does exactly the missing inputs, none twice; CSV output; an unreadable file gets an error
# line and the rest go on; SIGINT stops it with a line per finished input and the next run ends the
# job; bad arguments exit 2 with a message.
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
. tests/cli/cli.bash
Q=$BUILD/qvl
M=tests/fixtures/models/e2e/gguf
MA=(-m $M/e2e-Q8_0.gguf --mmproj $M/mmproj-e2e-F16.gguf)
GEN=(--temp 0 -n 6 --min-pixels 4096 --max-pixels 16384)
export QVL_CACHE=$tmp/cache

mkdir -p "$tmp/in/sub" "$tmp/in/.hidden"
cp tests/fixtures/images/rgb_64x64.png tests/fixtures/images/photo_96x60.jpg tests/fixtures/images/gray_72x56.png "$tmp/in/"
cp tests/fixtures/images/scene_64x128.png "$tmp/in/sub/"
cp tests/fixtures/videos/clip_96x64_10f_5fps.mkv "$tmp/in/sub/"
cp tests/fixtures/images/rgb_50x30.png "$tmp/in/.hidden/"
echo "notes" >"$tmp/in/readme.txt"
n_in=5

lines() { if [ -f "$1" ]; then grep -c . "$1"; else echo 0; fi; }
"$Q" batch "${MA[@]}" "${GEN[@]}" -p "What is in it?" -o "$tmp/out.jsonl" "$tmp/in" 2>"$tmp/err"
check '[ $? -eq 0 ] && [ "$(lines "$tmp/out.jsonl")" = $n_in ]' "first run: $(lines "$tmp/out.jsonl") lines: $(tail -3 "$tmp/err")"
check 'grep -q "5/5 done" "$tmp/err"' "progress: $(tail -2 "$tmp/err")"
check '! grep -q "readme.txt\|.hidden" "$tmp/out.jsonl"' "only images and videos, no hidden folders"
check '[ "$(grep -c "\"answer\":" "$tmp/out.jsonl")" = $n_in ] && grep -q "sub/clip_96x64_10f_5fps.mkv" "$tmp/out.jsonl"' \
  "answers for every input, the video too: $(head -c 400 "$tmp/out.jsonl")"
# the same answer as qvl run for one input
want=$("$Q" run "${MA[@]}" "${GEN[@]}" --image "$tmp/in/sub/scene_64x128.png" -p "What is in it?" --json 2>/dev/null |
  tr -d '\n\t' | sed -n 's/.*"text":"\(\([^"\\]\|\\.\)*\)".*/\1/p')
got=$(grep "scene_64x128.png" "$tmp/out.jsonl" | sed -n 's/.*"answer":"\(\([^"\\]\|\\.\)*\)".*/\1/p')
check '[ -n "$want" ] && [ "$want" = "$got" ]' "the batch's answer '$got' is qvl run's '$want'"

# again: nothing to do
cp "$tmp/out.jsonl" "$tmp/before.jsonl"
"$Q" batch "${MA[@]}" "${GEN[@]}" -p "What is in it?" -o "$tmp/out.jsonl" "$tmp/in" 2>"$tmp/err"
check '[ $? -eq 0 ] && cmp -s "$tmp/out.jsonl" "$tmp/before.jsonl" && grep -q "5/5 done (5 from before)" "$tmp/err"' \
  "a second run does nothing: $(tail -1 "$tmp/err")"

# a crash: two lines lost and half of a third written
head -2 "$tmp/before.jsonl" >"$tmp/out.jsonl"
sed -n 3p "$tmp/before.jsonl" | head -c 20 >>"$tmp/out.jsonl"
"$Q" batch "${MA[@]}" "${GEN[@]}" -p "What is in it?" -o "$tmp/out.jsonl" "$tmp/in" 2>"$tmp/err"
check '[ $? -eq 0 ] && [ "$(lines "$tmp/out.jsonl")" = $n_in ]' "resumed: $(lines "$tmp/out.jsonl") lines"
check '[ "$(sort "$tmp/out.jsonl" | md5sum)" = "$(sort "$tmp/before.jsonl" | md5sum)" ]' \
  "the resumed file holds the same lines, none twice: $(cat "$tmp/out.jsonl" | cut -c1-80)"
check 'grep -q "(2 from before)" "$tmp/err"' "two lines were kept: $(tail -1 "$tmp/err")"

# CSV, and an unreadable image among files named one by one
head -c 100 tests/fixtures/images/photo_96x60.jpg >"$tmp/broken.jpg"
"$Q" batch "${MA[@]}" "${GEN[@]}" -p "Say it" -o "$tmp/out.csv" "$tmp/broken.jpg" "$tmp/in/rgb_64x64.png" 2>"$tmp/err"
check '[ $? -eq 0 ] && head -1 "$tmp/out.csv" | grep -qx "path,answer,finish,prompt_tokens,completion_tokens,error"' \
  "CSV header: $(head -1 "$tmp/out.csv")"
check '[ "$(lines "$tmp/out.csv")" = 3 ] && grep -q "^\"$tmp/broken.jpg\",\"\",.*,\".\+\"$" "$tmp/out.csv" &&
  grep -q "^\"$tmp/in/rgb_64x64.png\",\".*\",[a-z_]*,[0-9]*,[0-9]*,\"\"$" "$tmp/out.csv"' \
  "an error line for the broken file, an answer for the other: $(cat "$tmp/out.csv")"
check 'grep -q "1 of 2 inputs failed" "$tmp/err"' "the failure is counted: $(tail -1 "$tmp/err")"

# Ctrl-C (SIGINT) mid-run: finished inputs keep their lines, the next run completes the job
mkdir -p "$tmp/many"
for i in $(seq 1 150); do cp tests/fixtures/images/rgb_333x250.png "$tmp/many/img$i.png"; done
"$Q" batch "${MA[@]}" --temp 0 -n 200 -p "Describe it at length." --parallel 2 -o "$tmp/many.jsonl" "$tmp/many" 2>"$tmp/err" &
pid=$!
for _ in $(seq 1 100); do [ "$(lines "$tmp/many.jsonl")" -ge 1 ] && break; sleep 0.1; done
kill -INT $pid
wait $pid
rc=$?
partial=$(lines "$tmp/many.jsonl")
check '[ $rc -eq 130 ] && [ "$partial" -ge 1 ] && [ "$partial" -lt 150 ] && grep -q "the same command goes on" "$tmp/err"' \
  "SIGINT: exit $rc, $partial lines: $(tail -2 "$tmp/err")"
"$Q" batch "${MA[@]}" --temp 0 -n 200 -p "Describe it at length." --parallel 2 -o "$tmp/many.jsonl" "$tmp/many" 2>"$tmp/err"
check '[ $? -eq 0 ] && [ "$(lines "$tmp/many.jsonl")" = 150 ] && [ "$(cut -d, -f1 "$tmp/many.jsonl" | sort -u | wc -l)" = 150 ]' \
  "after SIGINT the next run finishes: $(lines "$tmp/many.jsonl") lines"

# bad arguments
expect_error "-p PROMPT is required" "$Q" batch "${MA[@]}" -o "$tmp/x.jsonl" "$tmp/in"
expect_error "give a folder or files" "$Q" batch "${MA[@]}" -p hi -o "$tmp/x.jsonl"
expect_error "no-such-dir: No such file" "$Q" batch "${MA[@]}" -p hi -o "$tmp/x.jsonl" "$tmp/no-such-dir"
expect_error "need the vision projector" "$Q" batch -m $M/e2e-Q8_0.gguf -p hi -o "$tmp/x.jsonl" "$tmp/in"
echo "not json" >"$tmp/foreign.jsonl"
expect_error "line 1 is not a qvl batch line" "$Q" batch "${MA[@]}" -p hi -o "$tmp/foreign.jsonl" "$tmp/in"
mkdir -p "$tmp/empty"
expect_error "no images or videos found" "$Q" batch "${MA[@]}" -p hi -o "$tmp/x.jsonl" "$tmp/empty"
summary batch
