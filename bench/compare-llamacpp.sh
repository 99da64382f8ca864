#!/usr/bin/env bash
# Runs llama.cpp and qvl side by side on the same GGUF files with the same thread count and prints
# a table of ratios. Builds nothing of llama.cpp's: point it at an existing build.
#
#   bench/compare-llamacpp.sh LLAMA_BIN_DIR MODEL.gguf MMPROJ.gguf [THREADS]
#
# LLAMA_BIN_DIR holds llama-bench, llama-batched-bench and llama-mtmd-cli. Needs /usr/bin/time and
# python3 (for JSON). Run it on an idle machine: every number is wall-clock time.
# Stages (same definitions on both sides):
#   decode       tok/s generating 128 tokens after a 1-token context (llama-bench tg128)
#   prefill      tok/s for a 512-token prompt (llama-bench pp512)
#   vision WxH   ms to encode one image of that size at full resolution (mtmd "batch encoding")
#   ttft         ms from the start of image processing to the first token, 1024x768 image question
#   image prefill  tok/s of the decoder over the image question's image tokens (llama.cpp: the
#                "image decoded" batches of mtmd; qvl: the prefill part of the TTFT over its prompt)
#   batch N      aggregate decode tok/s of N sequences (llama-batched-bench S_TG, 16-token prompts,
#                32 generated tokens each; qvl bench batch_decode_tok_s)
#   peak RSS     MB, the whole process answering the 1024x768 image question (-n 1)
set -euo pipefail
LLAMA=${1:?usage: $0 LLAMA_BIN_DIR MODEL.gguf MMPROJ.gguf [THREADS]}
MODEL=${2:?model}
MMPROJ=${3:?mmproj}
T=${4:-$(nproc)}
QVL=${QVL:-$(dirname "$0")/../qvl}
PY=${PYTHON:-python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for b in llama-bench llama-batched-bench llama-mtmd-cli; do
  [ -x "$LLAMA/$b" ] || { echo "missing $LLAMA/$b" >&2; exit 2; }
done
[ -x "$QVL" ] || { echo "missing $QVL (run make)" >&2; exit 2; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); threads: $T" >&2

# Test images for llama.cpp and for qvl run (qvl bench makes same-sized JPEGs itself; encode time
# does not depend on pixel values).
"$PY" "$(dirname "$0")/test_images.py" "$out" 448x448 1024x768

echo "[llama.cpp] llama-bench pp512 / tg128..." >&2
"$LLAMA/llama-bench" -m "$MODEL" -t "$T" -p 512 -n 128 -r 2 -o json >"$out/lb.json" 2>"$out/lb.err"

echo "[llama.cpp] llama-batched-bench 1,2,4,8..." >&2
"$LLAMA/llama-batched-bench" -m "$MODEL" -t "$T" -c 2048 -b 512 -ub 512 -npp 16 -ntg 32 -npl 1,2,4,8 \
  --output-format jsonl >"$out/bb.jsonl" 2>"$out/bb.err"

for sz in 448x448 1024x768; do
  echo "[llama.cpp] llama-mtmd-cli image $sz..." >&2
  /usr/bin/time -v "$LLAMA/llama-mtmd-cli" -m "$MODEL" --mmproj "$MMPROJ" -t "$T" -c 4096 \
    --image "$out/img_$sz.png" -p "What is in this image? Answer briefly." -n 1 --temp 0 -lv 4 \
    >"$out/mtmd_$sz.out" 2>"$out/mtmd_$sz.err" || { tail -20 "$out/mtmd_$sz.err" >&2; exit 1; }
done

echo "[qvl] qvl bench..." >&2
"$QVL" bench -m "$MODEL" --mmproj "$MMPROJ" -t "$T" --json >"$out/qvl.json" 2>"$out/qvl.err" ||
  { tail -20 "$out/qvl.err" >&2; exit 1; }
echo "[qvl] qvl run, 1024x768 image question (peak RSS)..." >&2
/usr/bin/time -v "$QVL" run -m "$MODEL" --mmproj "$MMPROJ" -t "$T" --image "$out/img_1024x768.png" \
  --min-pixels 1 --max-pixels 786432 -p "What is in this image? Answer briefly." -n 1 --temp 0 \
  >"$out/qvl_run.out" 2>"$out/qvl_run.err"

"$PY" - "$out" "$T" <<'PYEOF'
import json, re, sys
d, T = sys.argv[1], sys.argv[2]
lb = json.load(open(f'{d}/lb.json'))
pp = next(r['avg_ts'] for r in lb if r['n_prompt'] > 0 and r['n_gen'] == 0)
tg = next(r['avg_ts'] for r in lb if r['n_gen'] > 0 and r['n_prompt'] == 0)
bb = {}
for line in open(f'{d}/bb.jsonl'):
    line = line.strip()
    if line.startswith('{'):
        r = json.loads(line)
        bb[int(r['pl'])] = float(r['speed_tg'])
def stamp(s):  # llama.cpp log time "M.SS.mmm.uuu"
    m, sec, ms, us = s.split('.')
    return int(m) * 60 + int(sec) + int(ms) / 1e3 + int(us) / 1e6
def mtmd(sz):
    err = open(f'{d}/mtmd_{sz}.err', errors='replace').read()
    enc = float(re.search(r'batch encoding done in (\d+) ms', err).group(1))
    start = stamp(re.search(r'^(\S+) I encoding mtmd batch', err, re.M).group(1))
    end = stamp(re.search(r'^(\S+) I llama_perf_context_print: +load time', err, re.M).group(1))
    rss = int(re.search(r'Maximum resident set size \(kbytes\): (\d+)', err).group(1)) / 1024
    ntok = sum(int(n) for n in re.findall(r'decoding image batch \d+/\d+, n_tokens_batch = (\d+)', err))
    dec_ms = sum(int(n) for n in re.findall(r'image decoded \(batch \d+/\d+\) in (\d+) ms', err))
    return enc, (end - start) * 1e3, rss, (ntok / (dec_ms / 1e3) if dec_ms else float('nan'))
q = json.load(open(f'{d}/qvl.json'))
qerr = open(f'{d}/qvl_run.err').read()
qrss = int(re.search(r'Maximum resident set size \(kbytes\): (\d+)', qerr).group(1)) / 1024
enc448, _, _, _ = mtmd('448x448')
enc1024, ttft, rss, img_pp = mtmd('1024x768')
qparts = q.get('ttft_parts_ms', {})
q_img_pp = q['ttft_prompt_tokens'] / (qparts['prefill'] / 1e3) if qparts.get('prefill') else float('nan')
rows = [
    ('decode tok/s (tg128)', tg, q['decode_tok_s'], True),
    ('prefill tok/s (pp512)', pp, q['prefill_tok_s'], True),
    ('vision encode 448x448 ms', enc448, q['vision_encode_ms']['448x448'], False),
    ('vision encode 1024x768 ms', enc1024, q['vision_encode_ms']['1024x768'], False),
    ('image-token prefill tok/s (1024x768)', img_pp, q_img_pp, True),
    ('TTFT 1024x768 question ms', ttft, q['ttft_ms'], False),
    ('peak RSS MB (image question)', rss, qrss, False),
]
for n in (1, 2, 4, 8):
    if n in bb and str(n) in q.get('batch_decode_tok_s', {}):
        rows.append((f'batch decode {n} seq tok/s', bb[n], q['batch_decode_tok_s'][str(n)], True))
print(f'| stage ({T} threads, isa {q["isa"]}) | llama.cpp | qvl | qvl advantage |')
print('| --- | ---: | ---: | ---: |')
for name, l, v, higher in rows:
    ratio = v / l if higher else l / v
    print(f'| {name} | {l:.1f} | {v:.1f} | {ratio:.2f}x |')
b1 = q.get('batch_decode_tok_s', {}).get('1'); b8 = q.get('batch_decode_tok_s', {}).get('8')
if b1 and b8:
    print(f'\nqvl 8-sequence scaling: {b8 / b1:.2f}x the single-sequence throughput')
PYEOF
