#!/usr/bin/env bash
# Installs HAProxy when it is missing, for the load-balancer example
# (deploy/haproxy, scripts/lb.sh) and its test.
exec "$(dirname "$0")/ensure-package.sh" haproxy haproxy haproxy
