#!/usr/bin/env bash
# Runs the whole test suite. The tests start their own redis-server processes
# (temporary directories, unix sockets) and a headless Chromium for the
# GraphiQL test, so both only need to be installed; this installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
scripts/ensure-chromium.sh
exec cargo test --all-targets "$@"
