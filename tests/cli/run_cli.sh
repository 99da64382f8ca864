#!/usr/bin/env bash
# Command-line behaviour: `qvl run` reproduces the reference greedy continuation of the e2e cases
# (text and image), `qvl tokenize` the reference ids, and the errors people hit are clear.
set -u
BUILD=${BUILD:-build/rel}
cd "$(dirname "$0")/../.."
QVL=$BUILD/qvl
E2E=tests/fixtures/models/e2e/gguf
CASES=tests/fixtures/cases/e2e/q8_0
. tests/cli/cli.bash

# 1. Reference greedy continuations. The fixture generates 8 tokens without stopping at EOS, so
#    compare up to the first EOS qvl stops at.
for c in text_only one_image two_images; do
  cj=$CASES/$c/case.json
  want=$(case_ints "$cj" generated)
  minp=$(case_int "$cj" min_pixels)
  maxp=$(case_int "$cj" max_pixels)
  args=(-m "$E2E/e2e-Q8_0.gguf" --temp 0 -n 8 --json --min-pixels "$minp" --max-pixels "$maxp")
  case $c in
  text_only) args+=(-p "What is the capital of France? Answer in one word.") ;;
  one_image) args+=(--mmproj "$E2E/mmproj-e2e-F16.gguf" --image tests/fixtures/images/scene_64x128.png -p "Describe this image.") ;;
  two_images) continue ;; # text before the images: not expressible with -p; covered by the golden dump
  esac
  if "$QVL" run "${args[@]}" >"$tmp/out.json" 2>"$tmp/err"; then
    got=$(json_ids "$tmp/out.json")
    if [ "$got" = "$want" ]; then ok; else bad "qvl run $c: ids [$got], reference [$want]"; fi
  else
    bad "qvl run $c failed: $(cat "$tmp/err")"
  fi
done

# 2. The streamed text equals the --json text.
"$QVL" run -m "$E2E/e2e-Q8_0.gguf" --temp 0 -n 8 -p "What is the capital of France? Answer in one word." >"$tmp/stream.txt" 2>"$tmp/err" || bad "stream run failed"
if grep -q "Larry Larry" "$tmp/stream.txt"; then ok; else bad "streamed text: $(cat "$tmp/stream.txt")"; fi

# 3. tokenize: the public tokenizer vector 0 and stdin input.
got=$("$QVL" tokenize -m "$E2E/e2e-Q8_0.gguf" "Hello world" 2>&1)
if [ "$got" = "[9707, 1879]" ]; then ok; else bad "tokenize 'Hello world' gave $got"; fi
got=$(printf 'Hello world' | "$QVL" tokenize -m "$E2E/e2e-Q8_0.gguf" - 2>&1)
if [ "$got" = "[9707, 1879]" ]; then ok; else bad "tokenize from stdin gave $got"; fi
got=$("$QVL" tokenize -m tests/fixtures/models/e2e/hf "Hello world" 2>&1)
if [ "$got" = "[9707, 1879]" ]; then ok; else bad "tokenize from the HF directory gave $got"; fi

# 4. Sampling options not given take the model's recommendation: a directory whose
#    generation_config.json says do_sample false generates greedily without --temp 0.
HF=tests/fixtures/models/e2e/hf
mkdir -p "$tmp/greedy"
for f in "$HF"/*; do ln -s "$PWD/$f" "$tmp/greedy/$(basename "$f")"; done
rm "$tmp/greedy/generation_config.json"
echo '{"do_sample": false, "eos_token_id": [151645, 151643]}' >"$tmp/greedy/generation_config.json"
P="What is the capital of France? Answer in one word."
if "$QVL" run -m "$HF" --temp 0 -n 8 --json -p "$P" >"$tmp/g0.json" 2>"$tmp/err" &&
   "$QVL" run -m "$tmp/greedy" -n 8 --json -p "$P" >"$tmp/g1.json" 2>>"$tmp/err"; then
  if [ -n "$(json_ids "$tmp/g0.json")" ] && [ "$(json_ids "$tmp/g0.json")" = "$(json_ids "$tmp/g1.json")" ]; then ok
  else bad "do_sample false: ids [$(json_ids "$tmp/g1.json")], greedy [$(json_ids "$tmp/g0.json")]"; fi
else
  bad "qvl run on the HF directories failed: $(tail -3 "$tmp/err")"
fi
#    and one that says temperature 100 over the whole vocabulary samples noise (not the greedy ids)
cp -r "$tmp/greedy" "$tmp/hot"
rm "$tmp/hot/generation_config.json"
echo '{"do_sample": true, "temperature": 100, "top_k": 0, "top_p": 1.0, "eos_token_id": [151645, 151643]}' \
  >"$tmp/hot/generation_config.json"
if "$QVL" run -m "$tmp/hot" -n 8 --seed 1 --json -p "$P" >"$tmp/g2.json" 2>"$tmp/err"; then
  if [ -n "$(json_ids "$tmp/g2.json")" ] && [ "$(json_ids "$tmp/g0.json")" != "$(json_ids "$tmp/g2.json")" ]; then ok
  else bad "temperature 100 from generation_config.json: ids [$(json_ids "$tmp/g2.json")] are the greedy ones"; fi
else
  bad "qvl run on the hot directory failed: $(tail -3 "$tmp/err")"
fi

# 5. Errors: exit status 1 or 2 and a message that says what is wrong.
expect_error "cannot open" "$QVL" run -m /nonexistent/model.gguf -p hi
expect_error "not a GGUF" "$QVL" run -m tests/fixtures/images/rgb_128x64.png -p hi
expect_error "is a vision projector (mmproj), not a text model: pass it with --mmproj" "$QVL" run -m "$E2E/mmproj-e2e-F16.gguf" -p hi
expect_error "pass it with --mmproj" "$QVL" tokenize -m "$E2E/mmproj-e2e-F16.gguf" hi
expect_error "mmproj" "$QVL" run -m "$E2E/e2e-Q8_0.gguf" --mmproj "$E2E/e2e-Q8_0.gguf" -p hi
expect_error "does not fit" "$QVL" run -m "$E2E/e2e-Q8_0.gguf" --mmproj tests/fixtures/models/micro-a/gguf/mmproj-micro-a-F32.gguf -p hi
expect_error "exceeds the context" "$QVL" run -m "$E2E/e2e-Q8_0.gguf" --ctx 64 -n 60 -p "What is the capital of France?"
expect_error "--mmproj" "$QVL" run -m "$E2E/e2e-Q8_0.gguf" --image tests/fixtures/images/rgb_128x64.png -p hi
expect_error "aspect ratio" "$QVL" run -m "$E2E/e2e-Q8_0.gguf" --mmproj "$E2E/mmproj-e2e-F16.gguf" --image tests/fixtures/images/wide_404x2.png -p hi
# the first bytes in hex a reader cannot take for decimal ("starting with 23" was the '#')
expect_error "not a recognised image: [0-9]* bytes starting with 0x23 0x20 0x71" "$QVL" run -m "$E2E/e2e-Q8_0.gguf" --mmproj "$E2E/mmproj-e2e-F16.gguf" --image tests/fixtures/README.md -p hi
expect_error "unknown option" "$QVL" run -m "$E2E/e2e-Q8_0.gguf" --bogus -p hi
expect_error "expects" "$QVL" run -m "$E2E/e2e-Q8_0.gguf" --temp abc -p hi
expect_error "unknown command" "$QVL" frobnicate

# 6. serve refuses a jobs database another program made, with a clear message, exit != 0, and the
#    file unchanged byte for byte (issue 24: it used to add a jobs table and switch on WAL).
python3 -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1]); c.execute("CREATE TABLE users(name TEXT)")
c.execute("INSERT INTO users VALUES (?)", ("ann",)); c.commit(); c.close()' "$tmp/foreign.db"
sum_before=$(cksum <"$tmp/foreign.db")
expect_error "not a qvl jobs database" timeout 60 "$QVL" serve -m "$E2E/e2e-Q8_0.gguf" --host 127.0.0.1 --port 0 --jobs-db "$tmp/foreign.db"
if [ "$(cksum <"$tmp/foreign.db")" = "$sum_before" ] && [ ! -e "$tmp/foreign.db-wal" ]; then ok; else bad "serve altered a foreign jobs db"; fi

# 7. Videos (issue 23): `qvl run --video` reproduces the greedy continuation of the video_basic case
#    (the micro-a GGUF files, through the engine), and video errors are clear.
MA=tests/fixtures/models/micro-a/gguf
VC=tests/fixtures/cases/micro-a/f32/video_basic/case.json
want=$(case_ints "$VC" generated)
if "$QVL" run -m "$MA/micro-a-F32.gguf" --mmproj "$MA/mmproj-micro-a-F32.gguf" --video tests/fixtures/videos/clip_96x64_10f_5fps.mkv \
  --video-min-pixels 4096 --video-max-pixels 65536 -p "Describe this video." --temp 0 -n 8 --json >"$tmp/v.json" 2>"$tmp/err"; then
  got=$(LC_ALL=C json_ids "$tmp/v.json") # the text of random weights is not valid UTF-8
  if [ "$got" = "$want" ]; then ok; else bad "qvl run --video: ids [$got], reference [$want]"; fi
else
  bad "qvl run --video failed: $(cat "$tmp/err")"
fi
# an image sent as a video: named as the image it is (not FFmpeg's 'png_pipe'), with the containers accepted
expect_error "this is a PNG image, not a video: send it as an image" "$QVL" run -m "$MA/micro-a-F32.gguf" --mmproj "$MA/mmproj-micro-a-F32.gguf" --video tests/fixtures/images/rgb_128x64.png -p hi
expect_error "this is a JPEG image, not a video.*Accepted video containers: MP4/MOV, Matroska/WebM, animated GIF" "$QVL" run -m "$MA/micro-a-F32.gguf" --mmproj "$MA/mmproj-micro-a-F32.gguf" --video tests/fixtures/images/photo_96x60.jpg -p hi
expect_error "exclude each other" "$QVL" run -m "$MA/micro-a-F32.gguf" --mmproj "$MA/mmproj-micro-a-F32.gguf" --video tests/fixtures/videos/clip_96x64_10f_5fps.mkv --video-fps 1 --video-frames 4 -p hi
expect_error "--mmproj" "$QVL" run -m "$MA/micro-a-F32.gguf" --video tests/fixtures/videos/clip_96x64_10f_5fps.mkv -p hi

# 8. Messages that name their fix (issue 36).
# remote images: the flag that enables them, not just "an allow-list"
expect_error "start qvl serve with --allow-image-url PREFIX" "$QVL" run -m "$E2E/e2e-Q8_0.gguf" --mmproj "$E2E/mmproj-e2e-F16.gguf" --image http://127.0.0.1:9/a.png -p hi
# qvl verify: its own prefix once ("qvl: verify: verify: ..." before)
expect_error "^qvl: verify: /nonexistent/model.gguf: No such file" "$QVL" verify /nonexistent/model.gguf
check '! grep -q "verify: verify:" "$tmp/err"' "verify: doubled prefix: $(cat "$tmp/err")"
# verify --hf on an empty cache, offline by design: no QVL_OFFLINE that was never set, the way to fill it
expect_error "qvl verify checks the cache only: a command with --hf downloads it first (./qvl serve --hf test/none:Q8_0)" \
  env -u QVL_OFFLINE -u HF_HUB_OFFLINE QVL_CACHE="$tmp/no-cache" "$QVL" verify --hf test/none:Q8_0
check '! grep -q "OFFLINE" "$tmp/err"' "verify --hf names an offline setting: $(cat "$tmp/err")"
# no -p: an error naming -p (even with --hf, which used to get "-m is required"), before any download
expect_error "-p PROMPT is required: the question to ask" "$QVL" run -m "$E2E/e2e-Q8_0.gguf"
expect_error "-p PROMPT is required" env QVL_HF_ENDPOINT=http://127.0.0.1:9 QVL_CACHE="$tmp/no-cache" "$QVL" run --hf test/none
check '[ ! -e "$tmp/no-cache" ]' "qvl run --hf without -p touched the cache"
# ... except with an image: "Describe this image.", said on stderr, the same request as with -p
"$QVL" run -m "$E2E/e2e-Q8_0.gguf" --mmproj "$E2E/mmproj-e2e-F16.gguf" --image tests/fixtures/images/rgb_64x64.png --temp 0 -n 4 --json >"$tmp/d1.json" 2>"$tmp/d1.err"
"$QVL" run -m "$E2E/e2e-Q8_0.gguf" --mmproj "$E2E/mmproj-e2e-F16.gguf" --image tests/fixtures/images/rgb_64x64.png --temp 0 -n 4 --json -p "Describe this image." >"$tmp/d2.json" 2>/dev/null
ptok() { tr -d '\n\t ' <"$1" | sed -n 's/.*"prompt_tokens":\([0-9]*\).*/\1/p'; }
check 'grep -q "no -p given; asking \"Describe this image.\"" "$tmp/d1.err"' "image without -p: no note on stderr: $(cat "$tmp/d1.err")"
check '[ -n "$(ptok "$tmp/d1.json")" ] && [ "$(ptok "$tmp/d1.json")" = "$(ptok "$tmp/d2.json")" ] && [ "$(LC_ALL=C json_ids "$tmp/d1.json")" = "$(LC_ALL=C json_ids "$tmp/d2.json")" ]' \
  "image without -p is not the request with -p \"Describe this image.\": $(head -c 200 "$tmp/d1.json") vs $(head -c 200 "$tmp/d2.json")"

summary cli
