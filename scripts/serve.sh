#!/usr/bin/env bash
# Starts votegraph on http://127.0.0.1:8000 (GraphiQL at /). Without REDIS_URL it
# runs its own redis-server with data kept in ./data, installing Redis if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${REDIS_URL:-}" ]; then
  scripts/ensure-redis.sh
fi
exec cargo run --release --bin votegraph -- "$@"
