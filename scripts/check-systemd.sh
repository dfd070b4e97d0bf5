#!/usr/bin/env bash
# Checks deploy/systemd/votegraph.service: `systemd-analyze verify` has
# nothing to say about it (it only warns on an unknown key or a bad value,
# so any output fails), and `systemd-analyze security` rates it OK or better
# (exposure under 5.0). Installs systemd-analyze if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-package.sh systemd-analyze systemd
unit=deploy/systemd/votegraph.service
name=$(basename "$unit")

# verify loads the unit as the system would: the targets it needs must
# exist, and so must ExecStart's program, which a build machine has not
# installed. So it runs in a scratch root holding the system's own units,
# this unit, and an executable stand-in at ExecStart's path.
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
program=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
mkdir -p "$root/usr/lib/systemd" "$root/etc/systemd/system" "$root$(dirname "$program")"
cp -r /usr/lib/systemd/system "$root/usr/lib/systemd/"
cp "$unit" "$root/etc/systemd/system/"
install -m 755 /bin/true "$root$program"

said=$(systemd-analyze verify --root="$root" "$name" 2>&1) || {
  echo "$said" >&2
  echo "check-systemd: systemd-analyze verify failed on $unit" >&2
  exit 1
}
if [ -n "$said" ]; then
  echo "$said" >&2
  echo "check-systemd: systemd-analyze verify warns about $unit" >&2
  exit 1
fi

# Exposure is counted in tenths: 49 is the top of "OK".
report=$(systemd-analyze security --offline=true --root="$root" --threshold=49 "$name" 2>&1) || {
  echo "$report" >&2
  echo "check-systemd: $unit is rated worse than OK" >&2
  exit 1
}
echo "check-systemd: verify clean; ${report##*$'\n'}"
