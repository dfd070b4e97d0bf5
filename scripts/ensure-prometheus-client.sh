#!/usr/bin/env bash
# Installs the Prometheus project's Python client when python3 lacks it: the
# metrics tests (tests/api/metrics.rs) check /metrics with its text-format
# parser.
exec "$(dirname "$0")/ensure-python-module.sh" prometheus_client prometheus-client python3-prometheus-client
