#!/usr/bin/env bash
# A question about a video clip through the servers: llama-server against qvl serve on the same
# GGUF files, the same clip, the same sampled frames and the same thread count, one server at a
# time (never both running).
#
#   bench/compare-video.sh LLAMA_BIN_DIR MODEL.gguf MMPROJ.gguf [THREADS] [CLIP]
#
# LLAMA_BIN_DIR holds llama-server built with video support (mtmd's MTMD_VIDEO, on by default: it
# runs ffmpeg and ffprobe as subprocesses). FFMPEG_DIR (default: from PATH) holds those two; it is
# also what makes the default clip, a 10 s 640x360 30 fps H.264 MP4 of ffmpeg's moving test
# pattern. Needs python3 and curl. Every time is wall-clock on the client side (request sent ->
# answer received, OpenAI chat completions, `video_url` data URL, max_tokens 1, not streamed,
# temperature 0), so run it on an idle machine or say the load.
#
# Same frames: llama.cpp samples with ffmpeg's fps filter at --video-fps FPS (default 2); this
# script counts the frames that filter gives for the clip and asks qvl for exactly that many
# (`video.num_frames`), which is also what qvl's own fps rule gives for a constant-rate clip.
# Tokens per frame pair differ by default (llama.cpp keeps each frame at its full size as an image,
# qvl follows transformers' video pixel budget), so by default llama-server gets
# --image-max-tokens set to qvl's tokens per frame pair: both then see a similar number of video
# tokens, and the table reports each side's own count. FULL=1 runs llama-server at its default
# frame size as well (far more tokens: slow).
set -euo pipefail
LLAMA=${1:?usage: $0 LLAMA_BIN_DIR MODEL.gguf MMPROJ.gguf [THREADS] [CLIP]}
MODEL=${2:?model}
MMPROJ=${3:?mmproj}
T=${4:-$(nproc)}
CLIP=${5:-}
FPS=${FPS:-2}
REPEATS=${REPEATS:-3}
FULL=${FULL:-0}
QVL=${QVL:-$(dirname "$0")/../qvl}
PY=${PYTHON:-python3}
PORT=${PORT:-18932}
FF=${FFMPEG_DIR:-$(dirname "$(command -v ffmpeg || echo /nonexistent/ffmpeg)")}
[ -x "$LLAMA/llama-server" ] || { echo "missing $LLAMA/llama-server" >&2; exit 2; }
[ -x "$QVL" ] || { echo "missing $QVL (run make)" >&2; exit 2; }
[ -x "$FF/ffmpeg" ] && [ -x "$FF/ffprobe" ] || { echo "no ffmpeg/ffprobe in ${FF} (set FFMPEG_DIR)" >&2; exit 2; }
out=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
echo "load average: $(loadavg); threads: $T; fps: $FPS; repeats: $REPEATS" >&2

if [ -z "$CLIP" ]; then
  CLIP=$out/clip.mp4
  "$FF/ffmpeg" -nostdin -v error -f lavfi -i testsrc2=size=640x360:rate=30 -t 10 -c:v libx264 \
    -preset veryfast -g 60 -pix_fmt yuv420p "$CLIP"
fi
# the frames llama.cpp's helper gets: ffmpeg -vf fps=FPS over the whole clip
FRAMES=$("$FF/ffmpeg" -nostdin -v error -i "$CLIP" -vf "fps=$FPS" -f framecrc - | grep -vc '^#')
CLIPINFO=$("$FF/ffprobe" -v error -select_streams v:0 -show_entries stream=codec_name,width,height,r_frame_rate,duration \
  -of csv=p=0 "$CLIP")
echo "clip: $CLIP ($CLIPINFO); frames at $FPS fps: $FRAMES" >&2

. "$(dirname "$0")/wait_ready.bash"

measure() { # NAME [JSON of extra body keys]: first + repeated video question, writes $out/NAME.json
  local extra=${2:-}
  [ -n "$extra" ] || extra='{}'
  "$PY" - "$PORT" "$REPEATS" "$out/$1.json" "$CLIP" "$extra" <<'PYEOF'
import base64, json, os, statistics, sys, time, urllib.request
port, repeats, dest, clip, extra = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
with urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/models', timeout=60) as r:
    model = json.loads(r.read())['data'][0]['id']
url = 'data:video/mp4;base64,' + base64.b64encode(open(clip, 'rb').read()).decode()
content = [{'type': 'video_url', 'video_url': {'url': url}},
           {'type': 'text', 'text': 'What happens in this video? Answer briefly.'}]
def ask():
    body = dict(model=model, messages=[{'role': 'user', 'content': content}], max_tokens=1, temperature=0,
                stream=False, **extra)
    req = urllib.request.Request(f'http://127.0.0.1:{port}/v1/chat/completions', json.dumps(body).encode(),
                                 {'Content-Type': 'application/json'})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=3600) as r:
        ans = json.loads(r.read())
    return (time.perf_counter() - t0) * 1e3, ans
def cpu_s(pid):  # user + system seconds of the server so far, with its finished children (ffmpeg)
    f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf('SC_CLK_TCK')
pid = int(os.environ['SERVER_PID'])
load0, c0 = open('/proc/loadavg').read().split()[:3], cpu_s(pid)
first_ms, first = ask()
c1 = cpu_s(pid)
again = [ask()[0] for _ in range(repeats)]
res = {'first_ms': first_ms, 'first_cpu_s': c1 - c0, 'prompt_tokens': first['usage']['prompt_tokens'],
       'timings': first.get('timings', {}), 'repeat_ms': statistics.median(again) if again else None,
       'repeat_all_ms': [round(m, 1) for m in again], 'load': load0,
       'load_end': open('/proc/loadavg').read().split()[:3]}
json.dump(res, open(dest, 'w'))
print(json.dumps(res), file=sys.stderr)
PYEOF
}

start() { # LOG CMD...: starts a server in the background and waits for it
  local log=$1; shift
  "$@" >"$log" 2>&1 &
  pid=$!
  export SERVER_PID=$pid
  wait_ready "$log" 600
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

echo "[qvl] qvl serve ($FRAMES frames)..." >&2
start "$out/qvl.log" "$QVL" serve -m "$MODEL" --mmproj "$MMPROJ" -t "$T" --port "$PORT" --host 127.0.0.1 \
  --video-max-frames "$FRAMES"
measure qvl "{\"video\": {\"num_frames\": $FRAMES}}"
stop
PER_PAIR=$("$PY" -c "import json,sys; print(round(json.load(open('$out/qvl.json'))['timings']['image_tokens'] / (($FRAMES + 1) // 2)))")

echo "[llama.cpp] llama-server, --image-max-tokens $PER_PAIR..." >&2
start "$out/llama.log" "$LLAMA/llama-server" -m "$MODEL" --mmproj "$MMPROJ" -t "$T" -c 8192 -np 1 \
  --port "$PORT" --host 127.0.0.1 --video-fps "$FPS" --video-ffmpeg-dir "$FF" --image-max-tokens "$PER_PAIR"
measure llama
stop
if [ "$FULL" = 1 ]; then
  echo "[llama.cpp] llama-server, frames at full size..." >&2
  start "$out/llama_full.log" "$LLAMA/llama-server" -m "$MODEL" --mmproj "$MMPROJ" -t "$T" -c 16384 -np 1 \
    --port "$PORT" --host 127.0.0.1 --video-fps "$FPS" --video-ffmpeg-dir "$FF"
  measure llama_full
  stop
fi

"$PY" - "$out" "$T" "$FRAMES" "$PER_PAIR" "$CLIPINFO" <<'PYEOF'
import json, os, sys
d, T, frames, per_pair, info = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
q, l = json.load(open(f'{d}/qvl.json')), json.load(open(f'{d}/llama.json'))
print(f'clip: {info}; {frames} frames sampled on both sides; {T} threads')
print(f"load average at the start of each side: qvl {' '.join(q['load'])}, llama.cpp {' '.join(l['load'])}\n")
lt, qt = l['timings'], q['timings']
print(f'| video question ({T} threads) | llama-server, {per_pair} tokens/pair max | qvl serve | qvl advantage |')
print('| --- | ---: | ---: | ---: |')
print(f"| prompt tokens (video + text) | {l['prompt_tokens']} | {q['prompt_tokens']} (video {qt.get('image_tokens')}) | |")
print(f"| time to the answer, first time, ms | {l['first_ms']:.0f} | {q['first_ms']:.0f} | {l['first_ms'] / q['first_ms']:.2f}x |")
print(f"| server CPU s for the first question | {l['first_cpu_s']:.1f} | {q['first_cpu_s']:.1f} | {l['first_cpu_s'] / q['first_cpu_s']:.2f}x |")
if l['repeat_ms'] and q['repeat_ms']:
    print(f"| same question again (cached), median ms | {l['repeat_ms']:.0f} | {q['repeat_ms']:.0f} | {l['repeat_ms'] / q['repeat_ms']:.2f}x |")
print(f"\nllama-server timings (first): prompt_n {lt.get('prompt_n')} prompt_ms {lt.get('prompt_ms', 0):.0f}; "
      f"qvl timings (first): preprocess (video decode) {qt.get('preprocess_ms', 0):.0f} ms, vision {qt.get('vision_ms', 0):.0f} ms, "
      f"prefill {qt.get('prefill_ms', 0):.0f} ms, ttft {qt.get('ttft_ms', 0):.0f} ms")
print(f"per-repeat ms: llama-server {l['repeat_all_ms']}; qvl {q['repeat_all_ms']}")
if os.path.exists(f'{d}/llama_full.json'):
    f = json.load(open(f'{d}/llama_full.json'))
    print(f"llama-server at full frame size: {f['prompt_tokens']} prompt tokens, first {f['first_ms']:.0f} ms "
          f"({f['first_cpu_s']:.1f} CPU s, load {' '.join(f['load'])}), repeat {f['repeat_ms']:.0f} ms")
PYEOF
