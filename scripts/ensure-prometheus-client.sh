#!/usr/bin/env bash
# Installs the Prometheus project's Python client when python3 lacks it: the
# metrics tests (tests/api/metrics.rs) check /metrics with its text-format
# parser. pip first; a system Python that refuses pip (PEP 668) gets
# Debian's package instead.
set -euo pipefail
"$(dirname "$0")/ensure-package.sh" python3 python3
python=${PYTHON:-python3}
if "$python" -c 'import prometheus_client' 2>/dev/null; then
  exit 0
fi
echo "prometheus_client is not installed for $python; installing it..." >&2
if "$python" -m pip install --quiet --disable-pip-version-check prometheus-client 2>/dev/null \
  && "$python" -c 'import prometheus_client' 2>/dev/null; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-prometheus-client >/dev/null
"$python" -c 'import prometheus_client'
