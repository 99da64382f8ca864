# Sourced by the server comparisons (bench/compare-servers.sh, bench/compare-video.sh).
# wait_ready LOG SECONDS: returns once the server on $PORT (process $pid) answers /health with 200,
# which it does when the model is loaded; exits the script when the server dies (showing the tail of
# its LOG) or is not ready after SECONDS.
wait_ready() {
  local log=$1 seconds=$2
  for _ in $(seq 1 $((seconds * 2))); do
    curl -sf -o /dev/null "http://127.0.0.1:$PORT/health" && return 0
    kill -0 "$pid" 2>/dev/null || { echo "server exited; its log:" >&2; tail -30 "$log" >&2; exit 1; }
    sleep 0.5
  done
  echo "server not ready after $seconds s" >&2; exit 1
}
