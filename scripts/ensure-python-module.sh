#!/usr/bin/env bash
# Installs a Python module when python3 lacks it:
#   scripts/ensure-python-module.sh MODULE PIP-PACKAGE DEBIAN-PACKAGE
# pip first; a system Python that refuses pip (PEP 668) gets Debian's
# package instead.
set -euo pipefail
module=$1 pip_package=$2 debian_package=$3
"$(dirname "$0")/ensure-package.sh" python3 python3
python=${PYTHON:-python3}
if "$python" -c "import $module" 2>/dev/null; then
  exit 0
fi
echo "$module is not installed for $python; installing it..." >&2
if "$python" -m pip install --quiet --disable-pip-version-check "$pip_package" 2>/dev/null \
  && "$python" -c "import $module" 2>/dev/null; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$debian_package" >/dev/null
"$python" -c "import $module"
