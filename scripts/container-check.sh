#!/usr/bin/env bash
# First reads docker-compose.yml (scripts/check-compose.py, on any
# machine): votegraph without capabilities, on a read-only file system,
# gaining no privileges; Redis' password a secret that Redis, its health
# check and votegraph's REDIS_URL take; Redis on internal networks only.
# Then builds the image with podman (the Dockerfile's `prebuilt` stage: the
# `runtime` image with a binary built here) and runs it against a Redis
# container, side by side as docker-compose.yml runs them, with its
# password, entrypoints, health check and hardening: both health checks
# pass, Redis refuses a client without the password, the server runs as
# its own user with no capabilities, /health answers
# from the host through the published port, a sign-up, a post and a query
# go through to Redis, and SIGTERM drains and stops it with status 0. Then
# deploy/systemd/votegraph.service runs under a real systemd in a container:
# its hardening is in force, it serves with the settings of its environment
# file, restarts after a crash, and drains and stops cleanly.
# Every container, pod and image it made is removed on every path. It skips,
# saying why, only where containers cannot run at all.
#
# Nothing is pulled from an image registry: the base is Debian bookworm
# made here with mmdebstrap (what debian:bookworm-slim holds, less
# trimmed), Redis is Debian's redis-server on that base, and the binary is
# the one built on this machine, stripped as the `build` stage strips it
# (which needs the Rust image), and added by the `prebuilt` stage in place
# of `runtime`. The binary must suit bookworm's glibc: build it on bookworm
# or older.
#
#   VOTEGRAPH_BINARY  the binary to put in the image (default: a release
#                     build, made if missing)
#   CHECK_BASE_IMAGE  an existing base image to use instead of making one
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
  echo "container-check: SKIPPED, this machine cannot run containers: $*" >&2
  exit 0
}
fail() {
  echo "container-check: FAILED: $*" >&2
  exit 1
}

scripts/ensure-pyyaml.sh
# docker-compose.yml's parts, as podman takes them (see check-compose.py).
compose() { python3 scripts/check-compose.py docker-compose.yml "$@"; }
compose || fail "docker-compose.yml breaks what docs/operations.md says of it"
echo "container-check: docker-compose.yml keeps its hardening, Redis password and networks" >&2

[ "$(uname -s)" = Linux ] || skip "podman runs them on Linux only"
[ "$(id -u)" -eq 0 ] || fail "run it as root (sudo): it uses podman's rootful mode and mmdebstrap's"
for tool in podman runc mmdebstrap; do
  scripts/ensure-package.sh "$tool" "$tool" >/dev/null || skip "$tool cannot be installed"
done
scripts/ensure-package.sh strip binutils

started=$SECONDS
run_id=votegraph-check-$$
work=$(mktemp -d)
images=()
cleanup() {
  podman pod rm --force --ignore "$run_id" >/dev/null 2>&1 || true
  podman secret rm "$run_id-redis-password" >/dev/null 2>&1 || true
  podman rm --force --ignore "$run_id-systemd" >/dev/null 2>&1 || true
  if [ ${#images[@]} -gt 0 ]; then
    podman rmi --force "${images[@]}" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Runs a command, showing what it said only when it fails.
quietly() {
  "$@" >"$work/said" 2>&1 || {
    cat "$work/said" >&2
    return 1
  }
}

# runc, and rlimits no higher than this machine grants: crun and podman's
# default rlimits fail where the process may not raise its own.
nofile=$(ulimit -Hn)
if [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ]; then nofile=65536; fi
cat >"$work/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=4096:4096"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF=$work/containers.conf

binary=${VOTEGRAPH_BINARY:-}
if [ -z "$binary" ]; then
  cargo build --release --bin votegraph
  binary=target/release/votegraph
fi
[ -x "$binary" ] || fail "no binary at $binary"

base=${CHECK_BASE_IMAGE:-}
if [ -z "$base" ]; then
  base=localhost/$run_id-base
  echo "container-check: making a Debian bookworm base image with mmdebstrap" >&2
  quietly mmdebstrap --variant=minbase bookworm "$work/base.tar"
  quietly podman import "$work/base.tar" "$base"
  rm "$work/base.tar"
  images+=("$base")
fi

# The probe: a container that runs `true`, or the reason none can run here.
if ! probe=$(podman run --rm --network none "$base" true 2>&1); then
  skip "$probe"
fi

# The binary as the build stage leaves it, alone in the build context.
mkdir "$work/binary"
strip --strip-debug -o "$work/binary/votegraph" "$binary"

echo "container-check: building the Dockerfile's prebuilt stage" >&2
quietly podman build --isolation chroot --format docker --target prebuilt \
  --build-arg RUNTIME_BASE="$base" --file "$PWD/Dockerfile" \
  --tag "localhost/$run_id-votegraph" "$work/binary"
images+=("localhost/$run_id-votegraph")

# The official image's entrypoint, as far as the compose file's Redis
# command uses it: the command, in Redis' directory, as its user.
printf '#!/bin/sh\ncd /var/lib/redis && exec "$@"\n' >"$work/docker-entrypoint.sh"
chmod 755 "$work/docker-entrypoint.sh"
cat >"$work/Containerfile.redis" <<EOF
FROM $base
RUN apt-get update \\
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \\
    && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
USER redis
EOF
echo "container-check: building a Redis image from Debian's redis-server" >&2
quietly podman build --isolation chroot --file "$work/Containerfile.redis" \
  --tag "localhost/$run_id-redis" "$work"
images+=("localhost/$run_id-redis")

# The unit installed as docs/operations.md says, on Debian with systemd and
# the Redis its environment file's REDIS_URL names.
cp deploy/systemd/votegraph.service deploy/systemd/votegraph.env "$work/binary/"
cat >"$work/binary/Containerfile" <<EOF
FROM localhost/$run_id-redis
USER root
RUN apt-get update \\
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd systemd-sysv curl \\
    && apt-get clean && rm -rf /var/lib/apt/lists/* \\
    && useradd --system --no-create-home --shell /usr/sbin/nologin votegraph
COPY votegraph /usr/local/bin/votegraph
COPY votegraph.service /etc/systemd/system/votegraph.service
COPY votegraph.env /etc/votegraph/votegraph.env
RUN chmod 600 /etc/votegraph/votegraph.env && systemctl enable redis-server votegraph
CMD ["/sbin/init"]
EOF
echo "container-check: building a Debian image with systemd and the unit" >&2
quietly podman build --isolation chroot --tag "localhost/$run_id-systemd" "$work/binary"
images+=("localhost/$run_id-systemd")
built=$SECONDS

# One pod: the containers share its network, as compose's share theirs,
# where `redis` names Redis; only votegraph is published, on loopback.
quietly podman pod create --name "$run_id" --publish 127.0.0.1::8000 --add-host redis:127.0.0.1
# The compose file's secret, hex as docs/operations.md makes it.
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$work/redis-password"
quietly podman secret create "$run_id-redis-password" "$work/redis-password"
secret=("--secret" "$run_id-redis-password,target=redis-password")
mapfile -d '' redis_command < <(compose redis-command)
mapfile -d '' redis_health < <(compose redis-health)
quietly podman run --detach --pod "$run_id" --name "$run_id-redis" "${secret[@]}" \
  "localhost/$run_id-redis" "${redis_command[@]}"
# The compose file's Redis health check, waited for as its votegraph does.
for _ in $(seq 50); do
  if podman exec "$run_id-redis" sh -c "${redis_health[0]}" 2>/dev/null; then break; fi
  sleep 0.2
done
podman exec "$run_id-redis" sh -c "${redis_health[0]}" \
  || { podman logs "$run_id-redis" 2>&1 | tail -20 >&2; fail "Redis' health check never passed"; }
answer=$(podman exec "$run_id-redis" redis-cli ping 2>&1 || true)
case $answer in
*NOAUTH*) ;;
*) fail "Redis answered $answer to a client without its password" ;;
esac
echo "container-check: Redis takes its password from the secret; its health check passes" >&2

mapfile -d '' hardening < <(compose votegraph-hardening)
quietly podman run --detach --pod "$run_id" --name "$run_id-votegraph" "${secret[@]}" \
  --entrypoint "$(compose votegraph-entrypoint | tr -d '\0')" "${hardening[@]}" \
  --env VOTEGRAPH_SHUTDOWN_GRACE_MS=500 "localhost/$run_id-votegraph"
votegraph_log() { podman logs "$run_id-votegraph" 2>&1 | tail -20 >&2; }

healthy=no
for _ in $(seq 60); do
  if podman healthcheck run "$run_id-votegraph" >/dev/null 2>&1; then
    healthy=yes
    break
  fi
  sleep 0.5
done
[ $healthy = yes ] || { votegraph_log; fail "the image's HEALTHCHECK never passed"; }
echo "container-check: the image's health check passes" >&2

uid=$(podman exec "$run_id-votegraph" id -u)
[ "$uid" = 10001 ] || fail "votegraph runs as uid $uid, not its own user"
status=$(podman exec "$run_id-votegraph" cat /proc/1/status)
t=$'\t'
for field in "NoNewPrivs:${t}1" "CapEff:${t}0000000000000000" "CapBnd:${t}0000000000000000"; do
  printf '%s\n' "$status" | grep -q "^$field" || fail "votegraph's process lacks $field"
done
podman exec "$run_id-votegraph" sh -c 'touch /tmp/x' 2>/dev/null \
  && fail "votegraph's file system is writable"
echo "container-check: votegraph runs hardened as the compose file says, as uid 10001" >&2

address=$(podman port "$run_id-votegraph" 8000/tcp)
health=$(curl -fsS "http://$address/health") || fail "/health on $address failed"
case $health in
*'"status":"ok"'*) ;;
*) fail "/health says $health" ;;
esac
echo "container-check: /health from the host: ok" >&2

gql() {
  curl -fsS "http://$address/graphql" -H 'content-type: application/json' \
    ${token:+-H "authorization: Bearer $token"} -d "$1"
}
token=
answer=$(gql '{"query":"mutation { signUp(name: \"container-check\", password: \"correct horse battery\") { token } }"}')
token=$(printf '%s' "$answer" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
[ -n "$token" ] || fail "signUp answered $answer"
answer=$(gql '{"query":"mutation { post(title: \"Shipped in a container\", link: \"https://example.com/\") { id } }"}')
case $answer in
*'"post":{"id":'*) ;;
*) fail "post answered $answer" ;;
esac
token=
answer=$(gql '{"query":"{ articles(order: NEWEST) { title poster { name } } articleCount }"}')
expected='{"data":{"articles":[{"title":"Shipped in a container","poster":{"name":"container-check"}}],"articleCount":1}}'
[ "$answer" = "$expected" ] || fail "the query answered $answer"
echo "container-check: a sign-up, a post and a query went through to Redis" >&2

quietly podman stop --time 30 "$run_id-votegraph"
status=$(podman inspect --format '{{.State.ExitCode}}' "$run_id-votegraph")
[ "$status" = 0 ] || { votegraph_log; fail "votegraph exited with $status on podman stop"; }
podman logs "$run_id-votegraph" 2>&1 | grep -q "draining before stopping" \
  || { votegraph_log; fail "votegraph did not drain on SIGTERM"; }
echo "container-check: SIGTERM drained and stopped it (status 0)" >&2

# systemd in a container: privileged, for the namespaces and mounts of the
# unit's sandbox.
quietly podman run --detach --systemd=always --privileged --name "$run_id-systemd" \
  "localhost/$run_id-systemd"
in_systemd() { podman exec "$run_id-systemd" "$@"; }
unit_log() { in_systemd journalctl --unit votegraph --no-pager 2>&1 | tail -20 >&2; }
wait_serving() {
  for _ in $(seq 60); do
    if in_systemd curl -fsS http://127.0.0.1:8000/health 2>/dev/null | grep -q '"status":"ok"'; then
      return 0
    fi
    sleep 0.5
  done
  unit_log
  fail "$1"
}
wait_serving "the unit never served /health"
pid=$(in_systemd systemctl show --property MainPID --value votegraph)
status=$(in_systemd cat "/proc/$pid/status")
uid=$(in_systemd id -u votegraph)
for field in "Uid:$t$uid$t" "NoNewPrivs:${t}1" "Seccomp:${t}2" \
  "CapEff:${t}0000000000000000" "CapBnd:${t}0000000000000000"; do
  printf '%s\n' "$status" | grep -q "^$field" || fail "the unit's process lacks $field"
done
in_systemd journalctl --unit votegraph --no-pager | grep -q 'redis answers redis=127.0.0.1:6379' \
  || { unit_log; fail "the unit did not take REDIS_URL from its environment file"; }
answer=$(in_systemd curl -fsS http://127.0.0.1:8000/graphql -H 'content-type: application/json' \
  -d '{"query":"mutation { signUp(name: \"systemd-check\", password: \"correct horse battery\") { user { name } } }"}')
[ "$answer" = '{"data":{"signUp":{"user":{"name":"systemd-check"}}}}' ] \
  || fail "signUp under systemd answered $answer"
echo "container-check: the unit serves as its user, hardened, with its environment file" >&2

in_systemd sh -c "kill -KILL $pid"
wait_serving "the unit did not restart after a crash"
[ "$(in_systemd systemctl show --property MainPID --value votegraph)" != "$pid" ] \
  || fail "the unit's process was not replaced after a crash"
echo "container-check: the unit restarts after a crash" >&2

in_systemd systemctl stop votegraph
result=$(in_systemd systemctl show --property Result --property ExecMainStatus votegraph)
[ "$result" = $'Result=success\nExecMainStatus=0' ] \
  || { unit_log; fail "systemctl stop ended with $result"; }
in_systemd journalctl --unit votegraph --no-pager | grep -q 'draining before stopping' \
  || { unit_log; fail "the unit did not drain on stop"; }
echo "container-check: systemctl stop drained and stopped it (status 0)" >&2

echo "container-check: passed (images built in $((built - started)) s, all in $((SECONDS - started)) s)"
