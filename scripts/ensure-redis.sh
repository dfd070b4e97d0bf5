#!/usr/bin/env bash
# Installs redis-server when it is missing.
exec "$(dirname "$0")/ensure-package.sh" redis-server redis-server redis
