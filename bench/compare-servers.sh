#!/usr/bin/env bash
# The latency a chatting person feels, through the servers: llama-server against qvl serve on the
# same GGUF files with the same thread count, one server at a time (never both running).
#
#   bench/compare-servers.sh LLAMA_BIN_DIR MODEL.gguf MMPROJ.gguf [THREADS] [REPEATS]
#
# LLAMA_BIN_DIR holds llama-server. Needs python3 and curl. Run it on an idle machine: every number
# is wall-clock time on the client side (request sent -> answer received), median of REPEATS.
# Rows (same requests to both servers, OpenAI chat completions, temperature 0, max_tokens 1, not
# streamed, so the answer arrives right after the first token):
#   text 16        a ~16-token text question, different text each time (no prefix reuse beyond the
#                  chat template's first tokens); the time is prompt prefill + one sampled token
#   image first    a 1024x768 image question the server has not seen (vision + prefill)
#   image repeat   the same image question again: both servers have the whole prompt cached, so
#                  this is what restoring the cached prompt and the per-request set-up cost
# SIZE=WxH changes the image (default 1024x768; a smaller one keeps the first encode short on a
# loaded machine, and the repeat then restores a shorter cached prompt).
set -euo pipefail
LLAMA=${1:?usage: $0 LLAMA_BIN_DIR MODEL.gguf MMPROJ.gguf [THREADS] [REPEATS]}
MODEL=${2:?model}
MMPROJ=${3:?mmproj}
T=${4:-$(nproc)}
REPEATS=${5:-5}
QVL=${QVL:-$(dirname "$0")/../qvl}
PY=${PYTHON:-python3}
PORT=${PORT:-18931}
SIZE=${SIZE:-1024x768}
[ -x "$LLAMA/llama-server" ] || { echo "missing $LLAMA/llama-server" >&2; exit 2; }
[ -x "$QVL" ] || { echo "missing $QVL (run make)" >&2; exit 2; }
out=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); threads: $T; repeats: $REPEATS; image $SIZE" >&2

. "$(dirname "$0")/wait_ready.bash"

measure() { # NAME: runs the three rows against the server on $PORT, writes $out/NAME.json
  "$PY" - "$PORT" "$REPEATS" "$out/$1.json" "$out/img_$SIZE.png" <<'PYEOF'
import base64, json, statistics, sys, time, urllib.request
port, repeats, dest, image = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
# the model id the server lists (qvl answers 404 for a model it does not serve)
with urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/models', timeout=60) as r:
    model = json.loads(r.read())['data'][0]['id']
def ask(content):
    body = json.dumps({'model': model, 'messages': [{'role': 'user', 'content': content}],
                       'max_tokens': 1, 'temperature': 0, 'stream': False}).encode()
    req = urllib.request.Request(f'http://127.0.0.1:{port}/v1/chat/completions', body,
                                 {'Content-Type': 'application/json'})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        ans = json.loads(r.read())
    ms = (time.perf_counter() - t0) * 1e3
    return ms, ans.get('usage', {}).get('prompt_tokens')
words = 'river stone lamp orange window music garden silver cloud paper engine violet market'.split()
ask('Warm up: say hi.')
text = []
for i in range(repeats):
    q = f'Question {i}: in one word, what colour is a {words[i % len(words)]} {words[(3 * i + 1) % len(words)]} at dusk?'
    text.append(ask(q))
url = 'data:image/png;base64,' + base64.b64encode(open(image, 'rb').read()).decode()
img = [{'type': 'image_url', 'image_url': {'url': url}}, {'type': 'text', 'text': 'What is in this image? Answer briefly.'}]
first = ask(img)
again = [ask(img) for _ in range(repeats)]
res = {'text16_ms': statistics.median(m for m, _ in text), 'text16_prompt_tokens': text[0][1],
       'image_first_ms': first[0], 'image_prompt_tokens': first[1],
       'image_repeat_ms': statistics.median(m for m, _ in again),
       'text16_all_ms': [round(m, 1) for m, _ in text], 'image_repeat_all_ms': [round(m, 1) for m, _ in again]}
res['load'] = open('/proc/loadavg').read().split()[:3]
json.dump(res, open(dest, 'w'))
print(json.dumps(res), file=sys.stderr)
PYEOF
}

"$PY" "$(dirname "$0")/test_images.py" "$out" "$SIZE"

echo "[llama.cpp] llama-server..." >&2
"$LLAMA/llama-server" -m "$MODEL" --mmproj "$MMPROJ" -t "$T" -c 4096 --port "$PORT" --host 127.0.0.1 \
  -np 1 >"$out/llama.log" 2>&1 &
pid=$!
wait_ready "$out/llama.log" 300
measure llama
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=

echo "[qvl] qvl serve..." >&2
"$QVL" serve -m "$MODEL" --mmproj "$MMPROJ" -t "$T" --port "$PORT" --host 127.0.0.1 >"$out/qvl.log" 2>&1 &
pid=$!
wait_ready "$out/qvl.log" 300
measure qvl
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=

"$PY" - "$out" "$T" "$SIZE" <<'PYEOF'
import json, sys
d, T, size = sys.argv[1], sys.argv[2], sys.argv[3]
l, q = json.load(open(f'{d}/llama.json')), json.load(open(f'{d}/qvl.json'))
print(f'| through the servers ({T} threads), ms to the answer of max_tokens 1 | llama-server | qvl serve | qvl advantage |')
print('| --- | ---: | ---: | ---: |')
for key, name in (('text16_ms', f"text question ({q['text16_prompt_tokens']} prompt tokens, new text)"),
                  ('image_first_ms', f"{size} image question, first time ({q['image_prompt_tokens']} prompt tokens)"),
                  ('image_repeat_ms', f'{size} image question, repeated (whole prompt cached)')):
    print(f'| {name} | {l[key]:.0f} | {q[key]:.0f} | {l[key] / q[key]:.2f}x |')
print(f"\nper-repeat ms: llama-server text {l['text16_all_ms']} image {l['image_repeat_all_ms']}; "
      f"qvl text {q['text16_all_ms']} image {q['image_repeat_all_ms']}")
print(f"load average after each server's requests: llama-server {' '.join(l['load'])}, qvl {' '.join(q['load'])}")
PYEOF
