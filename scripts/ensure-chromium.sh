#!/usr/bin/env bash
# Installs Chromium (for the GraphiQL browser test) when it is missing.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || [ -n "${CHROMIUM:-}" ]; then
  exit 0
fi
echo "chromium is not installed; installing it for the browser test..." >&2
if command -v apt-get >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
else
  echo "Please install Chromium and set CHROMIUM=/path/to/chromium." >&2
  exit 1
fi
