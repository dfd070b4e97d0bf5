#!/usr/bin/env bash
# Installs redis-server when it is missing (Debian/Ubuntu via apt-get, macOS via brew).
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
echo "redis-server is not installed; installing it..." >&2
if command -v apt-get >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
elif command -v brew >/dev/null 2>&1; then
  brew install redis
else
  echo "Please install Redis (redis-server) with your package manager, or set REDIS_URL." >&2
  exit 1
fi
