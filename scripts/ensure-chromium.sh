#!/usr/bin/env bash
# Installs Chromium (for the GraphiQL browser test) when it is missing,
# unless CHROMIUM names another browser binary.
if [ -n "${CHROMIUM:-}" ]; then exit 0; fi
exec "$(dirname "$0")/ensure-package.sh" chromium chromium
