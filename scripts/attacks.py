#!/usr/bin/env python3
"""Runs the attacks of issue 10 against a release votegraph and prints a table.

Usage: scripts/attacks.py [path/to/votegraph]   (default: target/release/votegraph)

Starts its own redis-server (unix socket in a temporary directory) and
votegraph on a free loopback port, seeds 300 articles, sends each attack once
and reports the answer, its size, the time to answer and the server's
resident memory afterwards. Everything it started is stopped on every path.
Loopback only; every loop is bounded.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def post(url, payload, headers=None, timeout=120):
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get(url, timeout=30):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def nested(levels):
    q = "name"
    for _ in range(levels):
        q = "articles(pageSize: 100) { id title link poster { %s } }" % q
    return "{ %s }" % q


def fragment_bomb(levels=20):
    parts = ["{ articles(pageSize: 1) { ...B0 } }"]
    for i in range(levels):
        parts.append(f"fragment B{i} on Article {{ poster {{ name }} ...B{i + 1} ...B{i + 1} }}")
    parts.append(f"fragment B{levels} on Article {{ id title }}")
    return " ".join(parts)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/votegraph"
    tmp = tempfile.mkdtemp(prefix="vg-attacks")
    sock = os.path.join(tmp, "redis.sock")
    redis = server = None
    try:
        redis = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.02)
        port = free_port()
        env = dict(os.environ, REDIS_URL=f"redis+unix://{sock}", VOTEGRAPH_BIND=f"127.0.0.1:{port}",
                   VOTEGRAPH_RATE_POST="1000000/60", VOTEGRAPH_RATE_SIGN_UP="1000000/60",
                   VOTEGRAPH_MAX_BODY_BYTES=os.environ.get("VOTEGRAPH_MAX_BODY_BYTES", "131072"),
                   RUST_LOG="warn")
        server = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        url = base + "/graphql"
        for _ in range(200):
            try:
                if get(base + "/health", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        # 300 articles from 30 posters, as in the measurements.
        for u in range(30):
            _, body = post(url, {"query": "mutation($n: String!) { signUp(name: $n, password: \"password-1\") { token } }",
                                 "variables": {"n": f"user{u}"}})
            token = json.loads(body)["data"]["signUp"]["token"]
            for a in range(10):
                post(url, {"query": "mutation($t: String!) { post(title: $t, link: \"https://example.com/a\") { id } }",
                           "variables": {"t": f"article {u}-{a}"}}, {"authorization": f"Bearer {token}"})

        rows = []

        def measure(name, send):
            started = time.monotonic()
            try:
                status, body = send()
            except OSError as e:
                status, body = "closed", str(e).encode()
            elapsed = (time.monotonic() - started) * 1000
            try:
                parsed = json.loads(body)
                code = parsed["errors"][0]["extensions"]["code"] if parsed.get("errors") else "ok"
            except (ValueError, KeyError, TypeError, IndexError):
                code = "-"
            rows.append((name, status, code, len(body), elapsed, rss_mib(server.pid)))

        aliases = "{ %s }" % " ".join(f"a{i}: articles(pageSize: 100) {{ id title }}" for i in range(500))
        spreads = "{ articles { %s } } fragment F on Article { id }" % ("...F " * 20000)
        measure("3 nested lists of 100", lambda: post(url, {"query": nested(3)}))
        measure("4 nested lists of 100", lambda: post(url, {"query": nested(4)}))
        measure("500 aliases of articles(pageSize:100)", lambda: post(url, {"query": aliases}))
        measure("fragment bomb (2^20 fields)", lambda: post(url, {"query": fragment_bomb()}))
        measure("20,000 spreads of one fragment", lambda: post(url, {"query": spreads}))
        big_vars = {"query": "{ articles { id } }", "variables": {"junk": "x" * (5 << 20)}}
        measure("5 MB of unused variables", lambda: post(url, big_vars))
        measure("unused variable (small)", lambda: post(url, {"query": "{ articles { id } }", "variables": {"junk": 1}}))
        groups = {"query": "mutation($g: [String!]!) { post(title: \"t\", link: \"https://e.com\", groups: $g) { id } }",
                  "variables": {"g": [f"g{i}" for i in range(150000)]}}
        measure("post with 150,000 groups", lambda: post(url, groups))
        measure("10 MB field name", lambda: post(url, {"query": "{ %s }" % ("f" * (10 << 20))}))
        measure("logIn over GET", lambda: get(url + "?query=" + urllib.request.quote(
            'mutation { logIn(name: "user1", password: "password-1") { token } }')))
        views = "mutation { %s }" % " ".join(f"v{i}: viewArticle(id: \"1\") {{ views }}" for i in range(1000))
        measure("1,000 aliased viewArticle", lambda: post(url, {"query": views}))
        auth = {"authorization": f"Bearer {token}"}
        measure("invisible title", lambda: post(url, {"query": "mutation { post(title: \"\u200b\u200b\", link: \"https://e.com\") { id } }"}, auth))
        measure("link https:evil.example", lambda: post(url, {"query": "mutation { post(title: \"t\", link: \"https:evil.example\") { id } }"}, auth))

        # 500 MB announced: refused from the header, before the body.
        def big_body():
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(b"POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                          b"content-length: 524288000\r\n\r\n{\"query\":")
                reply = s.recv(65536)
            head, _, body = reply.partition(b"\r\n\r\n")
            return int(head.split()[1]), body
        measure("500 MB body", big_body)

        # Half-sent headers: held until the header timeout, then dropped.
        held = []
        started = time.monotonic()
        for _ in range(3000):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
                held.append(s)
            except OSError:
                break
        rss_held = rss_mib(server.pid)
        closed = busy = limited = 0
        deadline = time.monotonic() + 30
        for s in held:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                first = s.recv(12)
                if first == b"":
                    closed += 1
                elif b" 503" in first:
                    busy += 1
                elif b" 429" in first:
                    limited += 1
            except OSError:
                pass
            s.close()
        rows.append((f"{len(held)} connections with half-sent headers",
                     f"{closed} held then closed, {limited} refused (429), {busy} refused (503)", "-", 0,
                     (time.monotonic() - started) * 1000, rss_held))

        print("| request | answer | code | bytes | ms | server RSS MiB |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, status, code, size, ms, rss in rows:
            print(f"| {name} | {status} | {code} | {size:,} | {ms:.1f} | {rss:.0f} |")
    finally:
        for p in (server, redis):
            if p is not None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
