#!/usr/bin/env bash
# N qvl replicas on one machine, each pinned to its own disjoint set of cores (docs/DEPLOY.md,
# "N replicas on one machine"). Put deploy/nginx/qvl.conf (or deploy/haproxy/qvl.cfg) in front.
#
#   deploy/local/replicas.sh N MODEL.gguf MMPROJ.gguf [more qvl serve flags]
#
# Environment: QVL (the binary, default ./qvl), BASE_PORT (8081: replica i listens on
# BASE_PORT+i-1), CORES (the cores to split, default 0..nproc-1, e.g. "0-7" or "0,2,4,6"),
# KV_CACHE_MB (per replica, default 1024), STATE_DIR (jobs databases, default ./qvl-state),
# HOST (127.0.0.1).
# Replica i is named r<i> (--replica-id), keeps its jobs in STATE_DIR/r<i>.db and runs
# --threads = its share of the cores. Pinning uses taskset (util-linux); `qvl serve
# --cpu-affinity`, once it exists, does the same from inside.
# Runs in the foreground; SIGTERM or SIGINT drains every replica (each finishes its requests) and
# exits when all have stopped. One line per replica on stdout: "replica NAME pid PID port PORT cores LIST".
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
n=$1 model=$2 mmproj=$3
shift 3
qvl=${QVL:-./qvl}
base=${BASE_PORT:-8081}
kv=${KV_CACHE_MB:-1024}
state=${STATE_DIR:-./qvl-state}
host=${HOST:-127.0.0.1}
command -v taskset >/dev/null || { echo "replicas.sh: taskset not found (Debian: util-linux)" >&2; exit 1; }
[ -x "$qvl" ] || { echo "replicas.sh: no qvl binary at $qvl (set QVL)" >&2; exit 1; }

# the core list, expanded: "0-3,6" -> 0 1 2 3 6
spec=${CORES:-0-$(($(nproc) - 1))}
cores=()
IFS=, read -ra parts <<<"$spec"
for p in "${parts[@]}"; do
  if [[ $p == *-* ]]; then for ((c = ${p%-*}; c <= ${p#*-}; c++)); do cores+=("$c"); done; else cores+=("$p"); fi
done
per=$((${#cores[@]} / n))
[ "$n" -ge 1 ] && [ "$per" -ge 1 ] || { echo "replicas.sh: $n replicas need at least $n cores (have ${#cores[@]}: $spec)" >&2; exit 2; }
mkdir -p "$state"

pids=()
stop() {
  trap - TERM INT
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
}
trap stop TERM INT
for ((i = 0; i < n; i++)); do
  mine=$(IFS=,; echo "${cores[*]:$((i * per)):$per}")
  name=r$((i + 1)) port=$((base + i))
  taskset -c "$mine" "$qvl" serve -m "$model" --mmproj "$mmproj" --host "$host" --port "$port" --threads "$per" \
    --kv-cache-mb "$kv" --replica-id "$name" --jobs-db "$state/$name.db" "$@" &
  pids+=($!)
  echo "replica $name pid $! port $port cores $mine"
done
# wait returns early when a trapped signal arrives: wait again until every replica is gone
rc=0
for p in "${pids[@]}"; do
  while :; do
    s=0
    wait "$p" || s=$?
    kill -0 "$p" 2>/dev/null || break
  done
  [ "$s" -eq 0 ] || rc=$s
done
exit $rc
