#!/usr/bin/env bash
# Usage: ensure-package.sh COMMAND APT_PACKAGE [BREW_PACKAGE]
# Installs the package providing COMMAND when COMMAND is missing (apt-get on
# Debian/Ubuntu, brew on macOS).
set -euo pipefail
command_name=$1 apt_package=$2 brew_package=${3:-}
if command -v "$command_name" >/dev/null 2>&1; then
  exit 0
fi
echo "$command_name is not installed; installing $apt_package..." >&2
if command -v apt-get >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$apt_package" >/dev/null
elif [ -n "$brew_package" ] && command -v brew >/dev/null 2>&1; then
  brew install "$brew_package"
else
  echo "Please install $apt_package ($command_name) with your package manager." >&2
  exit 1
fi
