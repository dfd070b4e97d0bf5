#!/usr/bin/env bash
# Runs a local Redis Cluster for trying votegraph's cluster mode: 3
# primaries and 3 replicas on 127.0.0.1, ports PORT_BASE..PORT_BASE+5
# (default 7000-7005, cluster bus on port+10000), no persistence, data in
# a temporary directory. Prints the REDIS_CLUSTER_NODES line to use, then
# stays in the foreground; Ctrl-C or SIGTERM stops every node and removes
# the directory.
#
#   scripts/cluster.sh
#   REDIS_CLUSTER_NODES=127.0.0.1:7000,... scripts/serve.sh   # elsewhere
set -euo pipefail
base=${PORT_BASE:-7000}
if ! [[ $base =~ ^[0-9]+$ ]] || ((base < 1024 || base > 55530)); then
  echo "PORT_BASE must be a number from 1024 to 55530 (bus ports are port+10000)" >&2
  exit 2
fi
for program in redis-server redis-cli; do
  if ! command -v "$program" >/dev/null; then
    echo "$program is missing (scripts/ensure-redis.sh installs it)" >&2
    exit 1
  fi
done
ports=()
for ((i = 0; i < 6; i++)); do ports+=($((base + i))); done
for port in "${ports[@]}"; do
  if redis-cli -p "$port" ping >/dev/null 2>&1; then
    echo "something already answers on 127.0.0.1:$port; set PORT_BASE" >&2
    exit 1
  fi
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/votegraph-cluster.XXXXXX")
pids=()
stop() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for port in "${ports[@]}"; do
  mkdir "$dir/$port"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$dir/$port" \
    --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 2000 --save "" --appendonly no \
    --logfile redis.log &
  pids+=($!)
done
# Every node answers within a few seconds, or its log says why not.
for port in "${ports[@]}"; do
  for ((try = 0; try < 50; try++)); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  if ! redis-cli -p "$port" ping >/dev/null 2>&1; then
    echo "redis-server on port $port did not start:" >&2
    tail -n 5 "$dir/$port/redis.log" >&2 || true
    exit 1
  fi
done

addrs=()
for port in "${ports[@]}"; do addrs+=("127.0.0.1:$port"); done
redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" ||
  { cat "$dir/create.log" >&2; exit 1; }
# Bounded: every node sees all slots served before the line is printed.
cluster_ok() { [[ $(redis-cli -p "$1" cluster info 2>/dev/null) == *cluster_state:ok* ]]; }
for port in "${ports[@]}"; do
  for ((try = 0; try < 100; try++)); do
    cluster_ok "$port" && break
    sleep 0.1
  done
  if ! cluster_ok "$port"; then
    echo "the cluster did not become ok on port $port" >&2
    exit 1
  fi
done

seeds=$(IFS=,; echo "${addrs[*]}")
echo "REDIS_CLUSTER_NODES=$seeds"
echo "Cluster running (data in $dir); Ctrl-C stops it." >&2
wait
