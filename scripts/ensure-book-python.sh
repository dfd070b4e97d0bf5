#!/usr/bin/env bash
# Installs what the tests that run Redis in Action's own chapter-1 Python
# (tests/book/) need: python3, and redis-py 2.10.6, the 2.x client the book's
# code is written for (zadd(name, member, score), zincrby(name, member,
# amount), hmset), in a folder of its own, target/book-python (or
# $BOOK_PYTHON_DIR), so no system or user site-packages is touched and a
# newer redis-py elsewhere does not matter. tests/book/book.py puts that
# folder on sys.path itself; for other scripts use
#   PYTHONPATH=target/book-python python3 ...
# pip first; a Python without pip gets Debian's python3-pip; a pip refusing
# to install beside an "externally managed" (PEP 668) Python is told
# --break-system-packages, safe here as it only writes into that folder.
set -euo pipefail
"$(dirname "$0")/ensure-package.sh" python3 python3
python=${PYTHON:-python3}
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${BOOK_PYTHON_DIR:-$repo/target/book-python}
version=2.10.6

install_pip() {
  if "$python" -m pip --version >/dev/null 2>&1; then return 0; fi
  echo "pip is not installed for $python; installing python3-pip..." >&2
  if command -v apt-get >/dev/null 2>&1; then
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-pip >/dev/null
  fi
  if ! "$python" -m pip --version >/dev/null 2>&1; then
    echo "Please install pip for $python (Debian: python3-pip)." >&2
    exit 1
  fi
}

if [ ! -f "$dir/redis/__init__.py" ]; then
  echo "redis-py $version is not in $dir; installing it..." >&2
  install_pip
  mkdir -p "$(dirname "$dir")"
  # Installed beside the folder and renamed into place, so tests that run
  # this script at the same time never see half an install.
  tmp=$(mktemp -d "$dir.tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  pip_install() {
    PIP_ROOT_USER_ACTION=ignore PIP_NO_INPUT=1 "$python" -m pip install --quiet \
      --disable-pip-version-check --upgrade --target "$tmp" "$@" "redis==$version"
  }
  if ! pip_install 2>"$tmp.err"; then
    if grep -qi 'externally.managed' "$tmp.err"; then
      pip_install --break-system-packages 2>"$tmp.err" || { cat "$tmp.err" >&2; rm -f "$tmp.err"; exit 1; }
    else
      cat "$tmp.err" >&2; rm -f "$tmp.err"; exit 1
    fi
  fi
  rm -f "$tmp.err"
  if [ -d "$dir" ] && [ ! -f "$dir/redis/__init__.py" ]; then
    rm -rf "$dir" # a half install from an interrupted older run
  fi
  # rename(2): fails, harmlessly, when another run got there first.
  "$python" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$tmp" "$dir" 2>/dev/null || true
fi

# redis-py 2.x imports distutils.version (for hiredis, which is not
# installed here); Python 3.12 and later have no distutils, and Debian's
# 3.11 has it only with python3-distutils. Then a minimal stand-in goes
# into the private folder (nothing else sees it).
if ! "$python" -c 'import distutils.version' 2>/dev/null \
  && [ ! -f "$dir/distutils/version.py" ]; then
  mkdir -p "$dir/distutils"
  cat >"$dir/distutils/version.py.$$" <<'EOF'
# Written by scripts/ensure-book-python.sh: this Python has no distutils,
# and redis-py 2.x imports distutils.version.StrictVersion (only using it to
# compare hiredis versions).
import functools
import re


@functools.total_ordering
class StrictVersion(object):
    def __init__(self, vstring):
        self.vstring = vstring
        self.version = tuple(int(n) for n in re.findall(r'\d+', vstring)[:3])

    def __eq__(self, other):
        if not isinstance(other, StrictVersion):
            other = StrictVersion(other)
        return self.version == other.version

    def __lt__(self, other):
        if not isinstance(other, StrictVersion):
            other = StrictVersion(other)
        return self.version < other.version

    def __str__(self):
        return self.vstring
EOF
  : >"$dir/distutils/__init__.py"
  mv -f "$dir/distutils/version.py.$$" "$dir/distutils/version.py"
fi

PYTHONPATH="$dir" "$python" -c '
import sys, redis
if redis.__version__ != sys.argv[1]:
    sys.exit("found redis-py %s at %s, not %s" % (redis.__version__, redis.__file__, sys.argv[1]))
redis.Redis(unix_socket_path="/nonexistent", decode_responses=True)
' "$version"
