#!/usr/bin/env python3
"""Reads docker-compose.yml as compose does (PyYAML, with `$$` standing for
`$`) for scripts/container-check.sh.

    check-compose.py FILE          checks what docs/operations.md
                                   (Containers) says of it; exits 1 naming
                                   each promise broken
    check-compose.py FILE PART     prints PART for podman, each argument
                                   ended by a NUL (`mapfile -d ''`):
                                   redis-command, redis-health,
                                   votegraph-entrypoint (JSON) or
                                   votegraph-hardening (podman's flags)
"""

import json
import sys

import yaml

SECRET = "redis-password"
SECRET_PATH = f"/run/secrets/{SECRET}"


def unescaped(value):
    """A value as the container gets it: compose reads `$$` as `$`."""
    return value.replace("$$", "$")


def problems(compose):
    """Each promise of the file that it breaks, in words."""
    services = compose.get("services") or {}
    votegraph = services.get("votegraph") or {}
    redis = services.get("redis") or {}
    networks = compose.get("networks") or {}
    internal = {name for name, n in networks.items() if (n or {}).get("internal") is True}
    found = []

    def need(ok, promise):
        if not ok:
            found.append(promise)

    need(votegraph.get("cap_drop") == ["ALL"], "votegraph has cap_drop: [ALL]")
    need(votegraph.get("read_only") is True, "votegraph has read_only: true")
    need(
        "no-new-privileges:true" in (votegraph.get("security_opt") or []),
        "votegraph has security_opt: [no-new-privileges:true]",
    )
    redis_networks = set(redis.get("networks") or [])
    need(
        redis_networks and redis_networks <= internal,
        "redis is on networks with internal: true only",
    )
    need(not redis.get("ports"), "redis publishes no port")
    votegraph_networks = set(votegraph.get("networks") or [])
    need(
        votegraph_networks & redis_networks and votegraph_networks - internal,
        "votegraph is on redis' network and on one that is not internal",
    )
    need(
        "file" in ((compose.get("secrets") or {}).get(SECRET) or {}),
        f"the secret {SECRET} is a file",
    )
    for name, service in (("redis", redis), ("votegraph", votegraph)):
        need(SECRET in (service.get("secrets") or []), f"{name} is given the secret {SECRET}")
    command = " ".join(unescaped(a) for a in redis.get("command") or [])
    need(
        f"requirepass $(cat {SECRET_PATH})" in command,
        "redis takes requirepass from the secret",
    )
    need(SECRET_PATH not in command.split("<<")[0], "redis' password is on no command line")
    health = " ".join(unescaped(a) for a in (redis.get("healthcheck") or {}).get("test") or [])
    need(
        f'REDISCLI_AUTH="$(cat {SECRET_PATH})" redis-cli ping' in health,
        "redis' health check pings with the password",
    )
    entrypoint = " ".join(unescaped(a) for a in votegraph.get("entrypoint") or [])
    need(
        f'REDIS_URL="redis://:$(cat {SECRET_PATH})@redis:6379/0"' in entrypoint
        and 'exec votegraph "$@"' in entrypoint,
        "votegraph's entrypoint puts the password in REDIS_URL, then runs it",
    )
    need(
        "REDIS_URL" not in (votegraph.get("environment") or {}),
        "votegraph's environment leaves REDIS_URL to the entrypoint",
    )
    return found


def part(compose, name):
    """One part of the file, as the arguments podman takes for it."""
    services = compose["services"]
    if name == "redis-command":
        return [unescaped(a) for a in services["redis"]["command"]]
    if name == "redis-health":
        test = services["redis"]["healthcheck"]["test"]
        assert test[0] == "CMD-SHELL", test
        return [unescaped(test[1])]
    if name == "votegraph-entrypoint":
        return [json.dumps([unescaped(a) for a in services["votegraph"]["entrypoint"]])]
    if name == "votegraph-hardening":
        votegraph = services["votegraph"]
        flags = [f"--cap-drop={c}" for c in votegraph.get("cap_drop") or []]
        for option in votegraph.get("security_opt") or []:
            # podman spells Docker's `no-new-privileges:true` without a value.
            option = {"no-new-privileges:true": "no-new-privileges"}.get(option, option)
            flags.append(f"--security-opt={option}")
        if votegraph.get("read_only"):
            # Docker's read_only adds no tmpfs; podman's does unless told.
            flags += ["--read-only", "--read-only-tmpfs=false"]
        flags += [f"--tmpfs={mount}" for mount in votegraph.get("tmpfs") or []]
        return flags
    raise SystemExit(f"check-compose: no part named {name}")


def main():
    with open(sys.argv[1]) as f:
        compose = yaml.safe_load(f)
    if len(sys.argv) > 2:
        for arg in part(compose, sys.argv[2]):
            sys.stdout.write(arg + "\0")
        return
    broken = problems(compose)
    for promise in broken:
        print(f"check-compose: {sys.argv[1]} breaks its promise: {promise}", file=sys.stderr)
    if broken:
        sys.exit(1)


if __name__ == "__main__":
    main()
