#!/usr/bin/env bash
# Runs llama.cpp and qvl side by side on the same GGUF files with the same thread count and prints
# a table of ratios. Builds nothing of llama.cpp's: point it at an existing build.
#
#   bench/compare-llamacpp.sh LLAMA_BIN_DIR MODEL.gguf MMPROJ.gguf [THREADS]
#
# LLAMA_BIN_DIR holds llama-bench, llama-batched-bench and llama-mtmd-cli. Needs /usr/bin/time and
# python3 (for JSON). Run it on an idle machine: every number is wall-clock time, except the CPU
# seconds of the image-question processes (user + system of the whole process; both engines'
# threads spin while they wait, so this counts some waiting too).
#
# Tiers: QVL_ISA (avx2, avx512, ...) reaches qvl and is printed with the table (with qvl's kernel
# per operation in the full run), so each table says which kernels ran. For the AVX2 tier compare
# QVL_ISA=avx2 with a llama.cpp build made with GGML_NATIVE=OFF and AVX-512 off.
#
# QUICK=1 (for a loaded machine): only the image question (SIZE, default 1024x768), answered with
# TG tokens (default 32) by one llama-mtmd-cli and one `qvl run --json` process per round, the two
# engines alternating, ROUNDS rounds (default 2); one column per round plus the median ratio. The
# rows: vision encode, image-token prefill, TTFT, decode tok/s of the TG tokens, CPU s, peak RSS.
# With THREADS 1 the CPU seconds count no spin-waiting: the steadiest figure when cores are shared.
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
QUICK=${QUICK:-0}
ROUNDS=${ROUNDS:-2}
TG=${TG:-32}
SIZE=${SIZE:-1024x768}
export QVL_ISA # qvl picks its kernels by it; unset means the best the CPU has
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
tools="llama-mtmd-cli"
[ "$QUICK" = 1 ] || tools="llama-bench llama-batched-bench llama-mtmd-cli"
for b in $tools; do
  [ -x "$LLAMA/$b" ] || { echo "missing $LLAMA/$b" >&2; exit 2; }
done
[ -x "$QVL" ] || { echo "missing $QVL (run make)" >&2; exit 2; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
echo "load average: $(loadavg); threads: $T; QVL_ISA=${QVL_ISA:-(unset)}" >&2

# Test images for llama.cpp and for qvl run (qvl bench makes same-sized JPEGs itself; encode time
# does not depend on pixel values).
"$PY" "$(dirname "$0")/test_images.py" "$out" 448x448 1024x768 $SIZE
QUESTION="What is in this image? Answer briefly."

llama_image() { # SIZE NAME NTOKENS: llama-mtmd-cli answers the image question, -lv 4 for its timings
  /usr/bin/time -v "$LLAMA/llama-mtmd-cli" -m "$MODEL" --mmproj "$MMPROJ" -t "$T" -c 4096 \
    --image "$out/img_$1.png" -p "$QUESTION" -n "$3" --temp 0 --ignore-eos -lv 4 \
    >"$out/$2.out" 2>"$out/$2.err" || { tail -20 "$out/$2.err" >&2; exit 1; }
}
qvl_image() { # SIZE NAME NTOKENS: qvl run answers the same question at the image's full size
  /usr/bin/time -v "$QVL" run -m "$MODEL" --mmproj "$MMPROJ" -t "$T" --image "$out/img_$1.png" \
    --min-pixels 1024 --max-pixels 786432 -p "$QUESTION" -n "$3" --temp 0 --json \
    >"$out/$2.json" 2>"$out/$2.err" || { tail -20 "$out/$2.err" >&2; exit 1; }
}

if [ "$QUICK" = 1 ]; then
  for r in $(seq 1 "$ROUNDS"); do
    first=llama; [ $((r % 2)) = 0 ] && first=qvl # alternate which engine goes first
    for side in $first $([ $first = llama ] && echo qvl || echo llama); do
      echo "$(loadavg)" >"$out/load_${side}_$r"
      echo "[round $r] $side $SIZE image question, $TG tokens (load $(loadavg))..." >&2
      if [ $side = llama ]; then llama_image "$SIZE" "mtmd_r$r" "$TG"; else qvl_image "$SIZE" "qvl_r$r" "$TG"; fi
    done
  done
  echo "llama.cpp: $LLAMA (its ggml-cpu is built for the ISA its CMake options named)"
  "$PY" - "$out" "$T" "$ROUNDS" "${QVL_ISA:-}" "$SIZE" <<'PYEOF'
import json, re, statistics, sys
d, T, rounds, isa_env, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
def stamp(s):  # llama.cpp log time "M.SS.mmm.uuu"
    m, sec, ms, us = s.split('.')
    return int(m) * 60 + int(sec) + int(ms) / 1e3 + int(us) / 1e6
def proc(err):  # (cpu s, peak RSS MB) of a process from /usr/bin/time -v
    cpu = sum(float(re.search(rf'{k} time \(seconds\): ([\d.]+)', err).group(1)) for k in ('User', 'System'))
    return cpu, int(re.search(r'Maximum resident set size \(kbytes\): (\d+)', err).group(1)) / 1024
def llama(r):
    err = open(f'{d}/mtmd_r{r}.err', errors='replace').read()
    enc = float(re.search(r'batch encoding done in (\d+) ms', err).group(1))
    start = stamp(re.search(r'^(\S+) I encoding mtmd batch', err, re.M).group(1))
    ntok = sum(int(n) for n in re.findall(r'decoding image batch \d+/\d+, n_tokens_batch = (\d+)', err))
    dec_ms = sum(int(n) for n in re.findall(r'image decoded \(batch \d+/\d+\) in (\d+) ms', err))
    ev = re.search(r'llama_perf_context_print: +eval time = +([\d.]+) ms / +(\d+) runs', err)
    pe = re.search(r'llama_perf_context_print: prompt eval time = +([\d.]+) ms / +(\d+) tokens', err)
    end = stamp(re.search(r'^(\S+) I llama_perf_context_print: +load time', err, re.M).group(1))
    # mtmd logs no stamp at the first token: TTFT = start of encoding -> end of the run, less the
    # decode steps that came after the first token (its "eval time"). Like qvl's, it does not
    # include reading the model; unlike qvl's, it does not include decoding the PNG.
    ttft = (end - start) * 1e3 - float(ev.group(1))
    cpu, rss = proc(err)
    return dict(vision=enc, img_pp=ntok / (dec_ms / 1e3), ttft=ttft, decode=int(ev.group(2)) / (float(ev.group(1)) / 1e3),
                cpu=cpu, rss=rss, prompt=int(pe.group(2)) if pe else None)
def qvl(r):
    j = json.load(open(f'{d}/qvl_r{r}.json'))
    t = j['timings']
    cpu, rss = proc(open(f'{d}/qvl_r{r}.err').read())
    return dict(vision=t['vision_ms'], img_pp=j['usage']['prompt_tokens'] / (t['prefill_ms'] / 1e3), ttft=t['ttft_ms'],
                decode=t['decode_tok_s'], cpu=cpu, rss=rss, isa=t.get('isa', '?'), prompt=j['usage']['prompt_tokens'])
L = [llama(r) for r in range(1, rounds + 1)]
Q = [qvl(r) for r in range(1, rounds + 1)]
load = lambda side, r: open(f'{d}/load_{side}_{r}').read().strip()
print(f'qvl isa: {Q[0]["isa"]} (QVL_ISA={isa_env or "unset"}); prompt tokens: llama.cpp {L[0]["prompt"]}, qvl {Q[0]["prompt"]}\n')
rows = [(f'vision encode {size} ms', 'vision', False), ('image-token prefill tok/s', 'img_pp', True),
        (f'TTFT {size} question ms', 'ttft', False), ('decode tok/s', 'decode', True),
        ('CPU s, whole process', 'cpu', False), ('peak RSS MB', 'rss', False)]
hdr = ' | '.join(f'round {r} (load {load("llama", r).split()[0]} / {load("qvl", r).split()[0]})' for r in range(1, rounds + 1))
print(f'| {T} threads: llama.cpp / qvl (ratio) | {hdr} | median ratio |')
print('| --- |' + ' ---: |' * (rounds + 1))
for name, k, higher in rows:
    cells, ratios = [], []
    for l, q in zip(L, Q):
        ratio = q[k] / l[k] if higher else l[k] / q[k]
        ratios.append(ratio)
        cells.append(f'{l[k]:.1f} / {q[k]:.1f} ({ratio:.2f}x)')
    print(f'| {name} | ' + ' | '.join(cells) + f' | **{statistics.median(ratios):.2f}x** |')
PYEOF
  exit 0
fi

echo "[llama.cpp] llama-bench pp512 / tg128..." >&2
"$LLAMA/llama-bench" -m "$MODEL" -t "$T" -p 512 -n 128 -r 2 -o json >"$out/lb.json" 2>"$out/lb.err"

echo "[llama.cpp] llama-batched-bench 1,2,4,8..." >&2
"$LLAMA/llama-batched-bench" -m "$MODEL" -t "$T" -c 2048 -b 512 -ub 512 -npp 16 -ntg 32 -npl 1,2,4,8 \
  --output-format jsonl >"$out/bb.jsonl" 2>"$out/bb.err"

for sz in 448x448 1024x768; do
  echo "[llama.cpp] llama-mtmd-cli image $sz..." >&2
  llama_image "$sz" "mtmd_$sz" 1
done

echo "[qvl] qvl bench..." >&2
"$QVL" bench -m "$MODEL" --mmproj "$MMPROJ" -t "$T" --json >"$out/qvl.json" 2>"$out/qvl.err" ||
  { tail -20 "$out/qvl.err" >&2; exit 1; }
echo "[qvl] qvl run, 1024x768 image question (peak RSS)..." >&2
qvl_image 1024x768 qvl_run 1
echo "load average at the end: $(loadavg)" >&2

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
print(f'| stage ({T} threads, qvl isa {q["isa"]}) | llama.cpp | qvl | qvl advantage |')
print('| --- | ---: | ---: | ---: |')
for name, l, v, higher in rows:
    ratio = v / l if higher else l / v
    print(f'| {name} | {l:.1f} | {v:.1f} | {ratio:.2f}x |')
b1 = q.get('batch_decode_tok_s', {}).get('1'); b8 = q.get('batch_decode_tok_s', {}).get('8')
if b1 and b8:
    print(f'\nqvl 8-sequence scaling: {b8 / b1:.2f}x the single-sequence throughput')
PYEOF
