#!/usr/bin/env bash
# Installs PyYAML when python3 lacks it: scripts/check-compose.py reads
# docker-compose.yml with it. pip first; a system Python that refuses pip
# (PEP 668) gets Debian's package instead.
set -euo pipefail
"$(dirname "$0")/ensure-package.sh" python3 python3
python=${PYTHON:-python3}
if "$python" -c 'import yaml' 2>/dev/null; then
  exit 0
fi
echo "PyYAML is not installed for $python; installing it..." >&2
if "$python" -m pip install --quiet --disable-pip-version-check pyyaml 2>/dev/null \
  && "$python" -c 'import yaml' 2>/dev/null; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-yaml >/dev/null
"$python" -c 'import yaml'
