#!/usr/bin/env bash
# Runs the whole test suite. The tests start their own redis-server processes
# (temporary directories, unix sockets), a headless Chromium for the
# GraphiQL test, nginx for the reverse-proxy example and HAProxy for the
# load-balancer example (and Redis replicas and sentinels for the failover
# test, from the same redis-server), and check /metrics
# with Prometheus' Python parser, and run the book's own Python code
# (redis-py 2.x, in target/book-python), so those only need to be
# installed; this installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
scripts/ensure-chromium.sh
scripts/ensure-nginx.sh
scripts/ensure-haproxy.sh
scripts/ensure-prometheus-client.sh
scripts/ensure-book-python.sh
# Everything is installed: a test that would skip for a missing program fails.
export VOTEGRAPH_TEST_REQUIRE_ALL=1
exec cargo test --all-targets "$@"
