#!/usr/bin/env bash
# Runs the whole test suite. The tests start their own redis-server processes
# (temporary directories, unix sockets), so Redis only needs to be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
exec cargo test --all-targets "$@"
