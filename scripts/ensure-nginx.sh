#!/usr/bin/env bash
# Installs nginx (Debian's small nginx-light) when it is missing, for the
# reverse-proxy example (deploy/nginx, scripts/proxy.sh) and its test.
exec "$(dirname "$0")/ensure-package.sh" nginx nginx-light nginx
