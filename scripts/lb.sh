#!/usr/bin/env bash
# Runs two votegraph instances behind HAProxy (deploy/haproxy/votegraph.cfg)
# on loopback until Ctrl-C or SIGTERM; every process it started is stopped
# on every way out.
#
#   REDIS_URL=redis://127.0.0.1:6379 scripts/lb.sh   # http://127.0.0.1:8080
#
# Without REDIS_URL it starts a redis-server of its own (no persistence,
# 127.0.0.1:6390) for the run. Settings (environment): LB_BIND
# (127.0.0.1:8080), VOTEGRAPH_1 (127.0.0.1:8001), VOTEGRAPH_2
# (127.0.0.1:8002). Stop one instance (kill -TERM its pid, printed at
# start) to watch it drain: /health turns 503, HAProxy takes it out, and
# no request fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export LB_BIND=${LB_BIND:-127.0.0.1:8080}
export VOTEGRAPH_1=${VOTEGRAPH_1:-127.0.0.1:8001}
export VOTEGRAPH_2=${VOTEGRAPH_2:-127.0.0.1:8002}
scripts/ensure-haproxy.sh
haproxy=$(command -v haproxy || echo /usr/sbin/haproxy)
cargo build --release --bin votegraph
pids=()
stop() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "${REDIS_URL:-}" ]; then
  scripts/ensure-redis.sh
  redis-server --port 6390 --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  pids+=($!)
  export REDIS_URL=redis://127.0.0.1:6390
fi
for bind in "$VOTEGRAPH_1" "$VOTEGRAPH_2"; do
  target/release/votegraph --bind "$bind" --shutdown-grace-ms 1500 \
    --trusted-proxies 127.0.0.1 &
  pids+=($!)
  echo "votegraph on $bind: pid $!" >&2
done
"$haproxy" -f deploy/haproxy/votegraph.cfg -db &
pids+=($!)
echo "HAProxy on http://$LB_BIND (instances $VOTEGRAPH_1, $VOTEGRAPH_2)" >&2
wait -n "${pids[@]}"
