#!/usr/bin/env bash
# Installs PyYAML when python3 lacks it: scripts/check-compose.py reads
# docker-compose.yml with it.
exec "$(dirname "$0")/ensure-python-module.sh" yaml pyyaml python3-yaml
