#!/usr/bin/env python3
"""Attacks a release votegraph and prints what it answered, as one Markdown table.

Usage: scripts/attacks.py [path/to/votegraph]   (default: target/release/votegraph)
       ATTACKS=burst,groups scripts/attacks.py   (only the groups whose names contain one of these)

Each group of attacks gets its own server: a redis-server on a unix socket in
a temporary directory and votegraph on a free loopback port, with the rate
limits of posts, sign-ups and votes lifted (some groups change more settings,
or Redis' maxmemory). Each row of the table is one attack: `| attack | answer
| code | detail |`, where answer is the HTTP status (or a WebSocket frame or
close code), code the GraphQL error code (`ok` without errors) and detail the
sizes, times, memory or counts that matter. A request that kills the process
is reported `crashed` (with the signal and the last line the server logged);
the group then goes on with a fresh server and a fresh Redis. An attack that
fails in the script itself is a row `error: ...`, and the next one runs.

What votegraph does with each attack:

- Costly documents (nested lists of 100, 500 aliases, fragment bombs,
  thousands of spreads) are refused before they run; oversized bodies,
  variables and field names are refused from their size; mutations are not
  run over GET; invisible titles and links without `//` are refused;
  connections that never finish their headers are dropped at the header
  timeout, and one address holds a bounded number of them.
- Nesting is bounded before the parser recurses: selection sets deeper than
  64, values and types deeper than 32 and variables deeper than 32 are
  refused with QUERY_TOO_COMPLEX over GET, POST and both WebSocket
  protocols, and the process stays up.
- Queries are admitted for their cost within a process-wide work budget:
  under 40 concurrent legal queries of cost 10,000, those that find no room
  in time get SERVICE_UNAVAILABLE (503), small queries keep answering, and
  memory returns after the burst.
- logOut ends the WebSockets its token authorised: they close with 4403
  within a second.
- Registering a persisted query (APQ) is a limited write: one address
  registers at most 100 new documents an hour (RATE_LIMITED, 429), and none
  are registered once Redis holds 80 % of its maxmemory
  (SERVICE_UNAVAILABLE, 503), so votes and posts still have room. The
  script sets maxmemory 20 MB above what Redis holds and registers 30 KB
  documents twice: with the default limits, and with the rate limits
  lifted so that only the memory guard stands between them and maxmemory.
- A name is one name whatever its case: signUp refuses a case twin
  (BAD_USER_INPUT), logIn accepts any case and logs into the one account.
- Subscriptions that differ only in comments and layout share one stream:
  an event is produced once for all of them.
- Request heads over 64 KiB get 431 HEADERS_TOO_LARGE; duplicate group names
  in a post are merged; behind trusted proxies the API port does not serve
  /metrics (404).

- Slow readers and other writers: 16 WebSockets of 20 subscriptions that
  never read are dropped at the send timeout while a reading subscriber
  keeps its latency; a burst of 120,000 book-style posts (redis-cli
  --pipe) is derived whole with the deriver's queue bounded and other
  clients answered; 100 articles in 3,000 groups each, written directly,
  are read at once (80 reads a second) while derived in short scripts
  (slowlog over 2 ms); 200,000 voters added by the book to one article
  cost the vote indexes what docs/keyspace.md states.
- Moderation: 5 accounts signed up at once flag an admin's article and it
  stays in every view (their flags reach the queue, and count toward
  hiding only from accounts old enough and with karma enough); with those
  floors at 0 they hide it, and after a restore the same 5 cannot hide it
  again. A moderator's vote on a removed article leaves its poster's karma
  as it was until the restore, which brings it up to date.
- Roles: an admin demoted after an expired ban, promotion and a fresh
  login cannot demote the real admin or promote themselves again
  (FORBIDDEN). On a 3+3 Redis Cluster (scripts/cluster.sh), two admins on
  different shards who demote each other at once through two instances,
  20 times, always leave one admin.

Everything the script starts is stopped on every path. Loopback only; every
loop is bounded and every socket and HTTP call has a timeout.
"""

import base64
import collections
import hashlib
import http.client
import json
import os
import re
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

BINARY = "target/release/votegraph"
BASE_ENV = {
    "VOTEGRAPH_RATE_POST": "1000000/60",
    "VOTEGRAPH_RATE_SIGN_UP": "1000000/60",
    "VOTEGRAPH_RATE_VOTE": "1000000/60",
    "RUST_LOG": "warn",
}
NET_ERRORS = (OSError, http.client.HTTPException)
TRANSPORT_WS = "graphql-transport-ws"
LEGACY_WS = "graphql-ws"

SIGN_UP = 'mutation($n: String!) { signUp(name: $n, password: "password-1") { token } }'
LOG_IN = 'mutation($n: String!, $p: String!) { logIn(name: $n, password: $p) { token } }'
POST = 'mutation($t: String!, $l: String!) { post(title: $t, link: $l, groups: ["g"]) { id } }'
VOTE = "mutation($id: ID!) { vote(articleId: $id) { votes } }"

rows = []  # (attack, answer, code, detail)
_servers = []  # every server started, stopped in main's finally
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy


# --- HTTP --------------------------------------------------------------------

def post(url, payload, headers=None, timeout=30):
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    try:
        with _opener.open(request, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get(url, timeout=30):
    try:
        with _opener.open(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def parse(body):
    try:
        return json.loads(body)
    except (ValueError, TypeError):
        return None


def code_of(body):
    """`ok` without errors, the first error's code, or `-` if not GraphQL."""
    parsed = parse(body) if isinstance(body, (bytes, str)) else body
    try:
        if not parsed.get("errors"):
            return "ok"
        return parsed["errors"][0].get("extensions", {}).get("code", "-")
    except (AttributeError, KeyError, TypeError, IndexError):
        return "-"


def message_of(body):
    try:
        return parse(body)["errors"][0]["message"]
    except (KeyError, TypeError, IndexError):
        return ""


def short(text, n=70):
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def gql(srv, query, variables=None, token=None, timeout=30, extensions=None):
    payload = {"query": query}
    if variables is not None:
        payload["variables"] = variables
    if extensions is not None:
        payload["extensions"] = extensions
    headers = {"authorization": f"Bearer {token}"} if token else {}
    status, body = post(srv.url, payload, headers, timeout)
    return status, body


def sign_up(srv, name):
    status, body = gql(srv, SIGN_UP, {"n": name})
    try:
        return parse(body)["data"]["signUp"]["token"]
    except (KeyError, TypeError):
        raise RuntimeError(f"signUp {name}: {status} {code_of(body)} {message_of(body)}")


def link_of(title):
    """A link per title: a repost of one link would answer the first article."""
    return "https://example.com/" + urllib.parse.quote(title)


def post_article(srv, token, title):
    status, body = gql(srv, POST, {"t": title, "l": link_of(title)}, token)
    try:
        return parse(body)["data"]["post"]["id"]
    except (KeyError, TypeError):
        raise RuntimeError(f"post: {status} {code_of(body)} {message_of(body)}")


# --- processes ---------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_ms(pid):
    """User + system CPU time the process used so far, in ms."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


class Server:
    """A redis-server and a votegraph using it, with their settings."""

    def __init__(self, env_overrides, redis_args):
        self.overrides = dict(env_overrides or {})
        self.redis_args = list(redis_args)
        self.tmp = self.sock = self.redis = self.proc = None
        self.port = 0

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self):
        return self.base + "/graphql"

    @property
    def pid(self):
        return self.proc.pid

    def rss(self):
        return rss_mib(self.proc.pid)


def _launch(srv):
    srv.tmp = tempfile.mkdtemp(prefix="vg-attacks-")
    srv.sock = os.path.join(srv.tmp, "redis.sock")
    srv.redis = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", srv.sock, "--save", "", "--appendonly", "no",
         "--dir", srv.tmp, *srv.redis_args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(250):
        if os.path.exists(srv.sock):
            break
        time.sleep(0.02)
    else:
        raise RuntimeError("redis-server did not start")
    srv.port = free_port()
    env = dict(os.environ, **BASE_ENV, REDIS_URL=f"redis+unix://{srv.sock}",
               VOTEGRAPH_BIND=f"127.0.0.1:{srv.port}")
    env.update(srv.overrides)
    with open(os.path.join(srv.tmp, "server.log"), "wb") as log:
        srv.proc = subprocess.Popen([BINARY], env=env, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=srv.tmp)
    wait_for_health(srv)


def wait_for_health(srv, within=20):
    """Returns once votegraph answers GET /health with 200; raises if it exits or never does."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise RuntimeError(f"votegraph exited at start: {exit_reason(srv)}")
        try:
            if get(srv.base + "/health", timeout=1)[0] == 200:
                return
        except NET_ERRORS:
            pass
        time.sleep(0.05)
    raise RuntimeError("votegraph did not answer /health")


def start(env_overrides=None, redis_args=()):
    """A fresh Redis and votegraph, ready (GET /health answered 200)."""
    srv = Server(env_overrides, redis_args)
    _servers.append(srv)
    try:
        _launch(srv)
    except BaseException:
        stop(srv)
        raise
    return srv


def stop(srv):
    """Stops both processes (idempotent) and removes the temporary directory."""
    for name in ("proc", "redis"):
        p = getattr(srv, name)
        if p is None:
            continue
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        setattr(srv, name, None)
    if srv.tmp:
        shutil.rmtree(srv.tmp, ignore_errors=True)
        srv.tmp = None


def restart(srv):
    """The same settings on a fresh Redis and a new process, in place."""
    stop(srv)
    _launch(srv)


def exit_reason(srv):
    rc = srv.proc.returncode if srv.proc else None
    if rc is None:
        what = "not answering"
    elif rc < 0:
        try:
            what = signal.Signals(-rc).name
        except ValueError:
            what = f"signal {-rc}"
    else:
        what = f"exit {rc}"
    last = ""
    try:
        with open(os.path.join(srv.tmp, "server.log"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        if lines:
            last = re.sub(r"\x1b\[[0-9;]*m", "", lines[-1])
    except (OSError, TypeError):
        pass
    return f"{what}: {short(last, 60)}" if last else what


def down(srv):
    """None while the server answers /health; otherwise (`crashed` or
    `unresponsive`, why), once a fresh server with the same settings is up."""
    if srv.proc is not None and srv.proc.poll() is None:
        try:
            if get(srv.base + "/health", timeout=5)[0] == 200:
                return None
        except NET_ERRORS:
            pass
        try:
            srv.proc.wait(timeout=3)  # a dying process may still be aborting
        except subprocess.TimeoutExpired:
            restart(srv)
            return "unresponsive", "no /health answer"
    why = exit_reason(srv)
    restart(srv)
    return "crashed", why


def redis_cli(srv, *args):
    out = subprocess.run(["redis-cli", "-s", srv.sock, *args], capture_output=True, timeout=10, check=True)
    return out.stdout.decode()


def redis_used_memory(srv):
    for line in redis_cli(srv, "INFO", "memory").splitlines():
        if line.startswith("used_memory:"):
            return int(line.split(":")[1])
    raise RuntimeError("no used_memory in INFO")


# --- WebSocket ---------------------------------------------------------------

class WsClosed(Exception):
    def __init__(self, code, reason):
        super().__init__(f"closed {code} {reason}")
        self.code = code
        self.reason = reason


class WsRefused(Exception):
    pass


class WebSocket:
    """A minimal RFC 6455 client: masked frames out, text/close/ping in."""

    GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self, port, protocol=TRANSPORT_WS, timeout=10, source="127.0.0.1"):
        self.protocol = protocol
        self.timeout = timeout
        self.buf = b""
        self.fragments = []
        self.close_code = None
        self.close_reason = ""
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
        try:
            self._handshake(port)
        except BaseException:
            self.sock.close()
            raise

    def _handshake(self, port):
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((
            f"GET /graphql HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Protocol: {self.protocol}\r\n\r\n").encode())
        deadline = time.monotonic() + self.timeout
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 65536:
                raise WsRefused("upgrade answer too long")
            self._recv_more(deadline)
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode(errors="replace").split("\r\n")
        status = lines[0].split(" ", 2)
        if len(status) < 2 or status[1] != "101":
            raise WsRefused(f"upgrade answered {lines[0]}")
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        accept = base64.b64encode(hashlib.sha1(key.encode() + self.GUID).digest()).decode()
        if headers.get("sec-websocket-accept") != accept:
            raise WsRefused("wrong Sec-WebSocket-Accept")

    def _recv_more(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("timed out")
        self.sock.settimeout(remaining)
        data = self.sock.recv(65536)
        if not data:
            if self.close_code is None:
                self.close_code, self.close_reason = "eof", "connection closed without a close frame"
            raise WsClosed(self.close_code, self.close_reason)
        self.buf += data

    def send_frame(self, opcode, payload):
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        mask = os.urandom(4)
        key = (mask * (n // 4 + 1))[:n]
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")
        self.sock.settimeout(self.timeout)
        self.sock.sendall(header + mask + masked)

    def send(self, message):
        self.send_frame(1, json.dumps(message).encode())

    def _frame(self):
        """(fin, opcode, payload) of the first complete frame in the buffer, or None."""
        b = self.buf
        if len(b) < 2:
            return None
        fin, opcode = b[0] & 0x80, b[0] & 0x0F
        masked, n, at = b[1] & 0x80, b[1] & 0x7F, 2
        if n == 126:
            if len(b) < 4:
                return None
            n, at = struct.unpack("!H", b[2:4])[0], 4
        elif n == 127:
            if len(b) < 10:
                return None
            n, at = struct.unpack("!Q", b[2:10])[0], 10
        mask = b""
        if masked:
            if len(b) < at + 4:
                return None
            mask, at = b[at:at + 4], at + 4
        if len(b) < at + n:
            return None
        payload = b[at:at + n]
        if mask:
            payload = bytes(x ^ mask[i % 4] for i, x in enumerate(payload))
        self.buf = b[at + n:]
        return fin, opcode, payload

    def _handle(self, frame):
        """A decoded message from a frame, or None (control or partial frame)."""
        fin, opcode, payload = frame
        if opcode == 9:
            try:
                self.send_frame(10, payload)
            except OSError:
                pass
            return None
        if opcode == 10:
            return None
        if opcode == 8:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            self.close_code, self.close_reason = code, payload[2:].decode(errors="replace")
            try:
                self.send_frame(8, payload[:2])
            except OSError:
                pass
            raise WsClosed(self.close_code, self.close_reason)
        self.fragments.append(payload)
        if not fin:
            return None
        text = b"".join(self.fragments)
        self.fragments = []
        return json.loads(text)

    def recv(self, timeout=None):
        """The next message (a dict); WsClosed on a close frame, socket.timeout after timeout."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        for _ in range(100000):
            frame = self._frame()
            if frame is None:
                self._recv_more(deadline)
                continue
            message = self._handle(frame)
            if message is not None:
                return message
        raise RuntimeError("too many frames")

    def pending(self):
        """Messages readable now, without waiting; stops at a close."""
        out = []
        self.sock.settimeout(0)
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError, socket.timeout):
            data = None
        except OSError:
            data = b""
        if data == b"":
            if self.close_code is None:
                self.close_code = "eof"
            return out
        if data:
            self.buf += data
        try:
            for _ in range(10000):
                frame = self._frame()
                if frame is None:
                    break
                message = self._handle(frame)
                if message is not None:
                    out.append(message)
        except WsClosed:
            pass
        return out

    def close(self):
        if self.close_code is None:
            try:
                self.send_frame(8, struct.pack("!H", 1000))
            except OSError:
                pass
        self.sock.close()


def ws_open(srv, token=None, protocol=TRANSPORT_WS, timeout=10, source="127.0.0.1"):
    """A WebSocket past connection_init/connection_ack, from the loopback address `source`."""
    ws = WebSocket(srv.port, protocol, timeout, source)
    try:
        payload = {"Authorization": f"Bearer {token}"} if token else {}
        ws.send({"type": "connection_init", "payload": payload})
        deadline = time.monotonic() + timeout
        for _ in range(50):
            message = ws.recv(max(0.01, deadline - time.monotonic()))
            kind = message.get("type")
            if kind == "connection_ack":
                return ws
            if kind == "ping":
                ws.send({"type": "pong"})
            elif kind not in ("ka", "pong"):
                raise RuntimeError(f"{kind} before connection_ack: {short(message.get('payload'), 60)}")
        raise RuntimeError("no connection_ack")
    except BaseException:
        ws.close()
        raise


_op_ids = iter(range(1, 1 << 30))


def ws_start(ws, query, variables=None):
    """Sends an operation (subscribe, or start in the legacy protocol); returns its id."""
    op_id = str(next(_op_ids))
    payload = {"query": query}
    if variables is not None:
        payload["variables"] = variables
    ws.send({"type": "subscribe" if ws.protocol == TRANSPORT_WS else "start", "id": op_id, "payload": payload})
    return op_id


def ws_run(ws, query, variables=None, timeout=10):
    """(type, payload) of the first answer to an operation sent over ws."""
    op_id = ws_start(ws, query, variables)
    deadline = time.monotonic() + timeout
    for _ in range(1000):
        message = ws.recv(max(0.01, deadline - time.monotonic()))
        kind = message.get("type")
        if kind == "ping":
            ws.send({"type": "pong"})
        elif message.get("id") == op_id and kind in ("next", "data", "error", "complete"):
            return kind, message.get("payload")
    raise RuntimeError("no answer")


def ws_code(kind, payload):
    if kind in ("next", "data"):
        return code_of(payload)
    errors = payload if isinstance(payload, list) else [payload]
    try:
        return errors[0].get("extensions", {}).get("code", "-")
    except (AttributeError, IndexError):
        return "-"


# --- older attacks -------------------------------------------------------------

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


def seed_posters(srv, users, per_user, title=lambda u, a: f"article {u}-{a}"):
    token = None
    for u in range(users):
        token = sign_up(srv, f"user{u}")
        for a in range(per_user):
            post_article(srv, token, title(u, a))
    return token


def older_attacks(idle):
    srv = start({"VOTEGRAPH_MAX_BODY_BYTES": os.environ.get("VOTEGRAPH_MAX_BODY_BYTES", "131072")})
    try:
        time.sleep(0.5)
        idle["fresh"] = srv.rss()
        state = {"token": seed_posters(srv, 30, 10)}  # 300 articles from 30 posters

        def measure(name, send):
            started = time.monotonic()
            try:
                status, body = send()
            except NET_ERRORS as e:
                status, body = "closed", short(e, 40).encode()
            elapsed = (time.monotonic() - started) * 1000
            rss = srv.rss()
            gone = down(srv)
            if gone:
                rows.append((name, gone[0], "-", f"{elapsed:.0f} ms; {gone[1]}; restarted"))
                state["token"] = seed_posters(srv, 30, 10)
                return
            rows.append((name, status, code_of(body), f"{len(body):,} bytes, {elapsed:.0f} ms, RSS {rss:.0f} MiB"))

        def auth():
            return {"authorization": f"Bearer {state['token']}"}

        aliases = "{ %s }" % " ".join(f"a{i}: articles(pageSize: 100) {{ id title }}" for i in range(500))
        spreads = "{ articles { %s } } fragment F on Article { id }" % ("...F " * 20000)
        measure("3 nested lists of 100", lambda: post(srv.url, {"query": nested(3)}))
        measure("4 nested lists of 100", lambda: post(srv.url, {"query": nested(4)}))
        measure("500 aliases of articles(pageSize:100)", lambda: post(srv.url, {"query": aliases}))
        measure("fragment bomb (2^20 fields)", lambda: post(srv.url, {"query": fragment_bomb()}))
        measure("20,000 spreads of one fragment", lambda: post(srv.url, {"query": spreads}))
        big_vars = {"query": "{ articles { id } }", "variables": {"junk": "x" * (5 << 20)}}
        measure("5 MB of unused variables", lambda: post(srv.url, big_vars))
        measure("unused variable (small)", lambda: post(srv.url, {"query": "{ articles { id } }", "variables": {"junk": 1}}))
        groups = {"query": "mutation($g: [String!]!) { post(title: \"t\", link: \"https://e.com\", groups: $g) { id } }",
                  "variables": {"g": [f"g{i}" for i in range(150000)]}}
        measure("post with 150,000 groups", lambda: post(srv.url, groups))
        measure("10 MB field name", lambda: post(srv.url, {"query": "{ %s }" % ("f" * (10 << 20))}))
        measure("logIn over GET", lambda: get(srv.url + "?query=" + urllib.parse.quote(
            'mutation { logIn(name: "user1", password: "password-1") { token } }')))
        views = "mutation { %s }" % " ".join(f"v{i}: viewArticle(id: \"1\") {{ views }}" for i in range(1000))
        measure("1,000 aliased viewArticle", lambda: post(srv.url, {"query": views}))
        measure("invisible title", lambda: post(
            srv.url, {"query": "mutation { post(title: \"\u200b\u200b\", link: \"https://e.com\") { id } }"}, auth()))
        measure("link https:evil.example", lambda: post(
            srv.url, {"query": "mutation { post(title: \"t\", link: \"https:evil.example\") { id } }"}, auth()))

        # 500 MB announced: refused from the header, before the body.
        def big_body():
            with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
                s.sendall(b"POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                          b"content-length: 524288000\r\n\r\n{\"query\":")
                reply = s.recv(65536)
            head, _, body = reply.partition(b"\r\n\r\n")
            return int(head.split()[1]), body
        measure("500 MB body", big_body)

        # Half-sent headers: held until the header timeout, then dropped.
        held = []
        started = time.monotonic()
        try:
            for _ in range(3000):
                try:
                    s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
                except OSError:
                    break
                held.append(s)
                try:
                    s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
                except OSError:
                    pass
            rss_held = srv.rss()
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
        finally:
            for s in held:
                s.close()
        rows.append((f"{len(held)} connections with half-sent headers",
                     f"{closed} held then closed, {limited} refused (429), {busy} refused (503)", "-",
                     f"{(time.monotonic() - started) * 1000:.0f} ms, RSS {rss_held:.0f} MiB while held"))
    finally:
        stop(srv)


# --- 1. deep nesting ---------------------------------------------------------

def deep_nesting():
    srv = start()
    try:
        deep_list = "{__typename(x:" + "[" * 2400 + "1" + "]" * 2400 + ")}"
        article_page = "{ articles(page: " + "[" * 1500 + "1" + "]" * 1500 + ") { id } }"
        default_value = "query($v: Int = " + "[" * 1300 + "1" + "]" * 1300 + ") { articleCount }"
        deep_variable = [1]
        for _ in range(99):
            deep_variable = [deep_variable]

        def http(send):
            status, body = send()
            return status, code_of(body), short(message_of(body), 50)

        def over_ws(protocol):
            def send():
                ws = ws_open(srv, protocol=protocol)
                try:
                    kind, payload = ws_run(ws, deep_list)
                    return f"ws {kind}", ws_code(kind, payload), ""
                except WsClosed as e:
                    return f"ws close {e.code}", "-", short(e.reason, 40)
                finally:
                    ws.close()
            return send

        attacks = [
            ("GET {__typename(x:[[…2,400 levels…]])}",
             lambda: http(lambda: get(srv.url + "?query=" + urllib.parse.quote(deep_list, safe=""), timeout=30))),
            ("POST articles(page: [[…1,500 levels…]])", lambda: http(lambda: post(srv.url, {"query": article_page}))),
            ("POST query($v: Int = [[…1,300 levels…]])", lambda: http(lambda: post(srv.url, {"query": default_value}))),
            ("WebSocket (graphql-transport-ws) subscribe of the 2,400 levels", over_ws(TRANSPORT_WS)),
            ("WebSocket (graphql-ws) start of the 2,400 levels", over_ws(LEGACY_WS)),
            ("POST variable nested 100 levels", lambda: http(lambda: post(
                srv.url, {"query": "query($v: [Int]) { articleCount }", "variables": {"v": deep_variable}}))),
        ]
        for name, send in attacks:
            started = time.monotonic()
            try:
                answer, code, detail = send()
            except (WsClosed, WsRefused) + NET_ERRORS as e:
                answer, code, detail = "closed", "-", short(e, 40)
            except Exception as e:  # noqa: BLE001 - still check the process below
                answer, code, detail = f"error: {short(e, 40)}", "-", ""
            elapsed = (time.monotonic() - started) * 1000
            gone = down(srv)
            if gone:
                rows.append((name, gone[0], code, f"{elapsed:.0f} ms; {gone[1]}; restarted"))
            else:
                rows.append((name, answer, code, "; ".join(x for x in (f"{elapsed:.0f} ms", detail, "alive") if x)))
    finally:
        stop(srv)


# --- 2. memory under concurrency --------------------------------------------

def memory_under_concurrency(idle):
    srv = start()
    try:
        seed_posters(srv, 10, 10, title=lambda u, a: f"article {u}-{a} " + "x" * 100)
        for _ in range(5):
            gql(srv, "{ articleCount }")
        time.sleep(1)
        before = srv.rss()
        idle["seeded"] = before
        fields = "id title link postedAt votes score groups downvotes slug views poster { name karma }"
        big = "{ " + " ".join(f"a{i}: articles(page:1, pageSize:100) {{ {fields} }}" for i in range(50)) + " }"

        answers, lock = collections.Counter(), threading.Lock()
        small_ms, small_failed = [], collections.Counter()
        peak = [before]
        done = threading.Event()

        def sampler():
            end = time.monotonic() + 120
            while not done.is_set() and time.monotonic() < end:
                peak[0] = max(peak[0], srv.rss())
                time.sleep(0.005)

        def one(i):
            try:
                status, body = post(srv.url, {"query": f"{big} # {i}"}, timeout=60)
                answer = (status, code_of(body))
            except NET_ERRORS as e:
                answer = ("closed", type(e).__name__)
            with lock:
                answers[answer] += 1

        def smalls(workers):
            end = time.monotonic() + 120
            while any(w.is_alive() for w in workers) and time.monotonic() < end:
                started = time.monotonic()
                try:
                    status, body = gql(srv, "{ articleCount }", timeout=30)
                    if status != 200 or code_of(body) != "ok":
                        small_failed[f"{status} {code_of(body)}"] += 1
                except NET_ERRORS as e:
                    small_failed[type(e).__name__] += 1
                small_ms.append((time.monotonic() - started) * 1000)
                time.sleep(0.05)

        sample = threading.Thread(target=sampler, daemon=True)
        sample.start()
        workers = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(40)]
        started = time.monotonic()
        for w in workers:
            w.start()
        small = threading.Thread(target=smalls, args=(workers,), daemon=True)
        small.start()
        for w in workers:
            w.join(timeout=90)
        small.join(timeout=40)
        elapsed = time.monotonic() - started
        done.set()
        sample.join(timeout=5)
        finished = time.monotonic()

        name = "40 concurrent 50 × articles(pageSize:100), cost 10,000"
        rows.append((name + ": peak RSS", f"+{peak[0] - before:.0f} MiB", "-",
                     f"idle {before:.0f} MiB → peak {peak[0]:.0f} MiB, {elapsed:.1f} s"))
        counts = ", ".join(f"{n} {code} ({status})" for (status, code), n in answers.most_common())
        errors = [c for (_, c), _ in answers.most_common() if c != "ok"]
        rows.append((name + ": answers", counts, errors[0] if errors else "ok", f"{sum(answers.values())} of 40"))
        ordered = sorted(small_ms)
        if ordered:
            failed = ", ".join(f"{n} {k}" for k, n in small_failed.items()) or "none failed"
            rows.append(("{ articleCount } every 50 ms meanwhile", f"max {ordered[-1]:.0f} ms", "-",
                         f"p50 {ordered[len(ordered) // 2]:.0f} ms, {len(ordered)} sent, {failed}"))
        gone = down(srv)
        if gone:
            rows.append((name + ": afterwards", gone[0], "-", f"{gone[1]}; restarted"))
            return
        for _ in range(5):
            gql(srv, "{ articleCount }", timeout=10)
        time.sleep(max(0.0, 10 - (time.monotonic() - finished)))
        rows.append((name + ": RSS 10 s after", f"{srv.rss():.0f} MiB", "-", f"idle before {before:.0f} MiB"))
    finally:
        stop(srv)


# --- 3. logOut and WebSocket sessions ----------------------------------------

def logout_ends_websockets(srv):
    poster = sign_up(srv, "wsposter")
    article = post_article(srv, poster, "an article to vote on over a WebSocket")
    token = sign_up(srv, "wsuser")
    ws = ws_open(srv, token)
    try:
        kind, payload = ws_run(ws, "{ me { name } }")
        try:
            name = payload["data"]["me"]["name"]
        except (KeyError, TypeError):
            name = None
        rows.append(("WebSocket with a token: { me { name } }", f"ws {kind}", ws_code(kind, payload), f"me.name = {name}"))
        status, body = gql(srv, "mutation { logOut }", token=token)
        logged_out = time.monotonic()
        if code_of(body) != "ok":
            rows.append(("logOut over HTTP", status, code_of(body), short(message_of(body))))
            return
        try:
            for _ in range(100):
                ws.recv(max(0.01, 2 - (time.monotonic() - logged_out)))
        except WsClosed as e:
            rows.append(("logOut, then wait for the socket", f"close {e.code}", "-",
                         f"{(time.monotonic() - logged_out) * 1000:.0f} ms after logOut; {short(e.reason, 50)}"))
            return
        except socket.timeout:
            pass
        kind, payload = ws_run(ws, "{ me { name } }")
        me = (payload or {}).get("data") if isinstance(payload, dict) else None
        vkind, vpayload = ws_run(ws, VOTE, {"id": article})
        vote = ws_code(vkind, vpayload)
        rows.append(("logOut, then wait for the socket", "open after 2 s", vote,
                     f"then over it: me → {short(json.dumps(me), 40)}, vote → {vote}"))
    except WsClosed as e:
        rows.append(("logOut and WebSocket sessions", f"close {e.code}", "-", short(e.reason, 60)))
    finally:
        ws.close()


# --- 4. persisted queries ---------------------------------------------------

def persisted_queries(label, env, count, stop_after=None):
    name = f"APQ ({label}): {count:,} registrations of 30 KB from one address"
    if stop_after:
        name = f"APQ ({label}): up to {count:,} registrations of 30 KB from one address"
    srv = start(env)
    try:
        poster = sign_up(srv, "apqposter")
        voter = sign_up(srv, "apqvoter")
        article = post_article(srv, poster, "before the registrations")
        used = redis_used_memory(srv)
        maxmemory = used + (20 << 20)
        redis_cli(srv, "CONFIG", "SET", "maxmemory", str(maxmemory))
        accepted, refused, sent, run = 0, collections.Counter(), 0, 0
        started = time.monotonic()
        crashed = None
        for i in range(count):
            text = f"{{ articleCount }} # {i} " + "x" * 30000
            digest = hashlib.sha256(text.encode()).hexdigest()
            sent += 1
            try:
                status, body = gql(srv, text, extensions={"persistedQuery": {"version": 1, "sha256Hash": digest}})
                code = code_of(body)
            except NET_ERRORS as e:
                status, code = "closed", type(e).__name__
            if status == 200 and code == "ok":
                accepted += 1
                run = 0
            else:
                refused[(status, code)] += 1
                run += 1
                if status == "closed":
                    crashed = down(srv)
                    if crashed:
                        break
            if stop_after and run >= stop_after:
                break
        elapsed = time.monotonic() - started
        stopped = f", stopped after {run} refusals in a row" if stop_after and run >= stop_after else ""
        refusals = ", ".join(f"{n} {code} ({status})" for (status, code), n in refused.most_common()) or "none refused"
        if crashed:
            rows.append((name, crashed[0], "-", f"after {sent} sent; {crashed[1]}; restarted"))
            return
        after = redis_used_memory(srv)
        rows.append((name, f"{accepted} of {sent} accepted", refusals,
                     f"maxmemory {maxmemory / 2**20:.0f} MiB, Redis used {used / 2**20:.1f} → {after / 2**20:.1f} MiB, "
                     f"{elapsed:.1f} s{stopped}"))
        status, body = gql(srv, VOTE, {"id": article}, voter)
        rows.append((f"APQ ({label}): a vote afterwards", status, code_of(body), short(message_of(body), 60)))
        title = "after the registrations"
        status, body = gql(srv, POST, {"t": title, "l": link_of(title)}, poster)
        rows.append((f"APQ ({label}): a post afterwards", status, code_of(body), short(message_of(body), 60)))
    finally:
        stop(srv)


# --- 5. case twins ----------------------------------------------------------

def case_twins(srv):
    sign_up(srv, "CaseTwin")
    status, body = gql(srv, SIGN_UP, {"n": "casetwin"})
    rows.append(("signUp casetwin after CaseTwin", status, code_of(body), short(message_of(body)) or "account created"))
    status, body = gql(srv, LOG_IN, {"n": "CASETWIN", "p": "password-1"})
    try:
        token = parse(body)["data"]["logIn"]["token"]
    except (KeyError, TypeError):
        rows.append(("logIn CASETWIN with CaseTwin's password", status, code_of(body), short(message_of(body))))
        return
    status, body = gql(srv, "{ me { name } }", token=token)
    try:
        name = parse(body)["data"]["me"]["name"]
    except (KeyError, TypeError):
        name = None
    rows.append(("logIn CASETWIN with CaseTwin's password", status, code_of(body), f"me.name = {name}"))


# --- 6. cosmetic variants of one subscription ------------------------------

def subscription_variants():
    srv = start({"VOTEGRAPH_WS_MAX_CONNECTIONS_PER_CLIENT": "300", "VOTEGRAPH_MAX_CONNECTIONS_PER_CLIENT": "1000"})
    sockets = []
    try:
        poster = sign_up(srv, "subposter")
        article = post_article(srv, poster, "the article everyone watches")
        voters = [sign_up(srv, f"voter{i}") for i in range(20)]
        refused = collections.Counter()
        for i in range(200):
            gap = " " * (1 + i % 4)
            line = "\n" * (i % 3)
            query = (f"subscription{gap}{{{line} scoreChanged{gap}{{ votes{line}{gap}article {{ title }} }} }}"
                     f"{gap}# variant {i}")
            try:
                ws = ws_open(srv)
            except (WsClosed, WsRefused, RuntimeError) + NET_ERRORS as e:
                refused[short(e, 30)] += 1
                continue
            sockets.append(ws)
            try:
                ws_start(ws, query)
            except OSError as e:
                refused[short(e, 30)] += 1
        time.sleep(0.5)
        for ws in sockets:  # an early error or close shows here
            for message in ws.pending():
                if message.get("type") in ("error", "complete"):
                    refused[f"{message.get('type')} {ws_code('error', message.get('payload'))}"] += 1
        status, body = get(srv.base + "/health", timeout=10)
        health = parse(body) or {}
        shared = health.get("sharedSubscriptions")
        streams = shared.get("streams", "-") if isinstance(shared, dict) else "-"
        problems = ", ".join(f"{n} {k}" for k, n in refused.items())
        rows.append(("200 variants of scoreChanged (comments, layout): shared streams", streams, "-",
                     f"{len(sockets)} sockets open, subscriptions {health.get('subscriptions', '-')}"
                     + (f"; {problems}" if problems else "")))

        expected = len(sockets) * len(voters)
        cpu_before = cpu_ms(srv.pid)
        started = time.monotonic()
        vote_codes = collections.Counter()
        for token in voters:
            status, body = gql(srv, VOTE, {"id": article}, token)
            vote_codes[code_of(body)] += 1
        events = 0
        selector = selectors.DefaultSelector()
        try:
            for ws in sockets:
                if ws.close_code is None:
                    selector.register(ws.sock, selectors.EVENT_READ, ws)
            deadline = time.monotonic() + 10
            while events < expected and selector.get_map() and time.monotonic() < deadline:
                for key, _ in selector.select(timeout=max(0.01, deadline - time.monotonic())):
                    ws = key.data
                    events += sum(1 for m in ws.pending() if m.get("type") in ("next", "data"))
                    if ws.close_code is not None:
                        selector.unregister(ws.sock)
        finally:
            selector.close()
        elapsed = (time.monotonic() - started) * 1000
        per_vote = (cpu_ms(srv.pid) - cpu_before) / len(voters)
        votes = ", ".join(f"{n} {c}" for c, n in vote_codes.items())
        rows.append(("20 votes with those 200 subscribers: server CPU per vote", f"{per_vote:.1f} ms", "-",
                     f"votes: {votes}; {events}/{expected} events delivered in {elapsed:.0f} ms"))
    finally:
        for ws in sockets:
            try:
                ws.close()
            except OSError:
                pass
        stop(srv)


# --- 7. docs vs server --------------------------------------------------------

def big_header(srv):
    reply = b""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        try:
            s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 100_000 + b"\r\n\r\n")
        except OSError:
            pass  # refused mid-send: the answer may already be there
        deadline = time.monotonic() + 10
        while len(reply) < 1 << 20 and time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                break
            if not chunk:
                break
            reply += chunk
            head, sep, body = reply.partition(b"\r\n\r\n")
            if sep:
                length = re.search(rb"(?i)content-length:\s*(\d+)", head)
                if length and len(body) >= int(length.group(1)):
                    break
    head, _, body = reply.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n")[0].decode(errors="replace") if reply else "closed without an answer"
    rows.append(("GET /health with one 100 KB header", short(status_line, 60), code_of(body) if body else "-",
                 f"{len(reply):,} bytes back"))


def duplicate_groups(srv):
    token = sign_up(srv, "grouper")
    query = 'mutation($g: [String!]!) { post(title: "twenty sames", link: "https://example.com/s", groups: $g) { groups } }'
    status, body = gql(srv, query, {"g": ["same"] * 20}, token)
    try:
        detail = "groups " + json.dumps(parse(body)["data"]["post"]["groups"])
    except (KeyError, TypeError):
        detail = short(message_of(body))
    rows.append(('post with groups = 20 × "same"', status, code_of(body), detail))


def metrics_behind_proxy():
    srv = start({"VOTEGRAPH_TRUSTED_PROXIES": "127.0.0.1"})
    try:
        status, body = get(srv.base + "/metrics", timeout=10)
        rows.append(("GET /metrics from loopback, trusted proxy 127.0.0.1, no forwarding header", status,
                     code_of(body) if body.startswith(b"{") else "-", f"{len(body):,} bytes"))
    finally:
        stop(srv)


# --- 8. slow readers and other writers ---------------------------------------

VOTE_DIR = "mutation($id: ID!, $d: VoteDirection!) { vote(articleId: $id, direction: $d) { votes } }"
WATCH = "subscription { scoreChanged { votes downvotes score article { id title link poster { name } } } }"


def resp(*args):
    """One Redis command in the protocol redis-cli --pipe sends."""
    parts = [f"*{len(args)}\r\n".encode()]
    for a in args:
        a = str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def redis_pipe(srv, commands, pipes=1):
    """Sends the commands as fast as `pipes` redis-cli --pipe at once can (the
    commands dealt out in order, a run of len(commands) // pipes to each);
    answers the seconds taken."""
    started = time.monotonic()
    size = -(-len(commands) // pipes)
    procs = [subprocess.Popen(["redis-cli", "-s", srv.sock, "--pipe"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(pipes)]
    feeders = [threading.Thread(target=p.communicate, args=(b"".join(commands[i * size:(i + 1) * size]),),
                                daemon=True) for i, p in enumerate(procs)]
    for f in feeders:
        f.start()
    for f, p in zip(feeders, procs):
        f.join(timeout=600)
        if p.poll() is None:
            p.kill()
            p.wait()
    return time.monotonic() - started


def book_post(id_, posted, poster="user:book", votes=1):
    """post_article's commands for article `id_` (INCR article: answers it on a fresh Redis)."""
    article = f"article:{id_}"
    return [resp("INCR", "article:"), resp("SADD", f"voted:{id_}", poster), resp("EXPIRE", f"voted:{id_}", 604800),
            resp("HSET", article, "title", f"book {id_}", "link", "https://example.com/", "poster", poster,
                 "time", posted, "votes", votes),
            resp("ZADD", "score:", posted + 432 * votes, article), resp("ZADD", "time:", posted, article)]


def deriver(srv):
    return (parse(get(srv.base + "/health", timeout=10)[1]) or {}).get("deriver", {})


class Sampled:
    """Samples RSS, the deriver's queue and the subscriptions in the background."""

    def __init__(self, srv):
        self.srv, self.rss, self.pending, self.stop = srv, srv.rss(), 0, threading.Event()
        self.started, self.one_left = time.monotonic(), None  # when one subscription was left
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        end = time.monotonic() + 900
        while not self.stop.is_set() and time.monotonic() < end:
            self.rss = max(self.rss, self.srv.rss())
            try:
                health = parse(get(self.srv.base + "/health", timeout=10)[1]) or {}
                self.pending = max(self.pending, health.get("deriver", {}).get("pending", 0))
                if self.one_left is None and health.get("subscriptions") == 1:
                    self.one_left = time.monotonic() - self.started
            except NET_ERRORS:
                pass
            time.sleep(0.05)

    def done(self):
        self.stop.set()
        self.thread.join(timeout=5)
        return self


class Timed:
    """Runs send() again and again in the background, timing each answer."""

    def __init__(self, send, gap=0.02):
        self.send, self.gap, self.ms, self.failed = send, gap, [], collections.Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        end = time.monotonic() + 900
        while not self.stop.is_set() and time.monotonic() < end:
            started = time.monotonic()
            try:
                status, body = self.send()
                if status != 200 or code_of(body) != "ok":
                    self.failed[f"{status} {code_of(body)}"] += 1
            except NET_ERRORS as e:
                self.failed[type(e).__name__] += 1
            self.ms.append((time.monotonic() - started) * 1000)
            time.sleep(self.gap)

    def done(self):
        self.stop.set()
        self.thread.join(timeout=60)
        return self

    def summary(self):
        ordered = sorted(self.ms) or [0]
        failed = ", ".join(f"{n} {k}" for k, n in self.failed.items()) or "none failed"
        return (f"p50 {ordered[len(ordered) // 2]:.0f} ms, p99 {ordered[len(ordered) * 99 // 100]:.0f} ms, "
                f"max {ordered[-1]:.0f} ms, {len(ordered)} sent, {failed}")


def others(srv, token, article):
    """Another client's requests meanwhile: a vote switched up and back, and a read of itself."""
    directions = iter(["UP", "NONE"] * 100000)
    votes = Timed(lambda: gql(srv, VOTE_DIR, {"id": article, "d": next(directions)}, token, timeout=30))
    reads = Timed(lambda: gql(srv, "{ me { name karma } }", token=token, timeout=30))
    return votes, reads


def wait_idle(srv, limit):
    """Waits (at most `limit` seconds) until the deriver has nothing pending twice in a row."""
    started, idle = time.monotonic(), 0
    while time.monotonic() - started < limit and idle < 2:
        d = deriver(srv)
        idle = idle + 1 if d.get("pending") == 0 and not d.get("busy") else 0
        time.sleep(0.1)
    return time.monotonic() - started


def never_reading_websockets():
    """16 sockets × 20 subscriptions that never read while votes land, beside one reader."""
    srv = start()
    sockets = []
    try:
        poster = sign_up(srv, "wsposter")
        articles = [post_article(srv, poster, f"watched {i} " + "x" * 200) for i in range(10)]
        voter = sign_up(srv, "wsvoter")
        watcher = ws_open(srv, source="127.0.0.2")  # another client address than the 16
        ws_start(watcher, WATCH)
        time.sleep(0.5)

        turns = iter(range(1 << 30))  # vote n switches articles[n % 10] up, then back

        def votes_for(seconds):
            """Votes one at a time; each is timed until the reader sees its event."""
            ms, directions, end = [], ["UP", "NONE"], time.monotonic() + seconds
            while time.monotonic() < end:
                n = next(turns)
                article = articles[n % len(articles)]
                started = time.monotonic()
                gql(srv, VOTE_DIR, {"id": article, "d": directions[(n // len(articles)) % 2]}, voter)
                for _ in range(1000):
                    message = watcher.recv(10)
                    if message.get("type") == "next":
                        break
                ms.append((time.monotonic() - started) * 1000)
            ordered = sorted(ms) or [0]
            return (f"p50 {ordered[len(ordered) // 2]:.1f} ms, p99 {ordered[len(ordered) * 99 // 100]:.1f} ms, "
                    f"max {ordered[-1]:.0f} ms, {len(ordered)} votes")

        quiet = votes_for(5)
        before = srv.rss()
        for _ in range(16):
            ws = ws_open(srv)
            sockets.append(ws)
            for _ in range(20):
                ws_start(ws, WATCH)
        time.sleep(0.5)
        subscribed = parse(get(srv.base + "/health")[1]).get("subscriptions")
        sampled = Sampled(srv)
        loaded = votes_for(40)
        sampled.done()
        left = parse(get(srv.base + "/health")[1]).get("subscriptions")
        name = "16 WebSockets × 20 subscriptions that never read, 40 s of votes"
        rows.append((name + ": server memory", f"+{sampled.rss - before:.0f} MiB", "-",
                     f"{before:.0f} → peak {sampled.rss:.0f} MiB; subscriptions {subscribed} → {left}, "
                     f"one left {sampled.one_left or -1:.1f} s into the votes"))
        rows.append((name + ": vote to a reading subscriber's event", loaded, "-", f"alone: {quiet}"))
        watcher.close()
    finally:
        for ws in sockets:
            ws.close()
        stop(srv)


def book_burst(count=120_000):
    """The book's post_article, `count` times as fast as one pipe goes."""
    srv = start()
    try:
        token = sign_up(srv, "bystander")
        article = post_article(srv, token, "voted on meanwhile")
        now = time.time()
        commands = []
        for i in range(count):
            commands += book_post(i + 2, now - count + i)
        sampled = Sampled(srv)
        votes, reads = others(srv, token, article)
        written = redis_pipe(srv, commands, pipes=4)
        settled = wait_idle(srv, 600)
        votes.done(), reads.done(), sampled.done()
        derived = int(redis_cli(srv, "ZCARD", "top:all"))
        filed = int(redis_cli(srv, "ZCARD", "user:book:articles:time"))
        karma = redis_cli(srv, "ZSCORE", "karma:", "user:book").strip()
        d = deriver(srv)
        name = f"book-style burst of {count:,} posts"
        rows.append((name + ": derived", f"{derived - 1:,} of {count:,}", "-",
                     f"in the poster's feed {filed:,}, karma {karma.split('.')[0]}; written in {written:.1f} s, "
                     f"derived {settled:.1f} s later; dropped touches {d.get('dropped')}, passes {d.get('passes')}"))
        rows.append((name + ": deriver queue", f"peak {sampled.pending:,} pending", "-",
                     f"peak RSS {sampled.rss:.0f} MiB"))
        rows.append((name + ": another client's vote meanwhile", votes.summary(), "-", ""))
        rows.append((name + ": another client's { me } meanwhile", reads.summary(), "-", ""))
    finally:
        stop(srv)


def many_groups(articles=100, groups=3000, readers=80, waves=10):
    """Articles in thousands of groups written directly, then read: `readers`
    concurrent reads a second, `waves` times, while they are derived."""
    srv = start()
    try:
        now = time.time()
        commands = []
        for i in range(1, articles + 1):
            commands += book_post(i, now - articles + i)
            commands += [resp("SADD", f"group:g{g}", f"article:{i}") for g in range(groups)]
        redis_cli(srv, "CONFIG", "SET", "slowlog-log-slower-than", "2000")
        redis_cli(srv, "CONFIG", "SET", "slowlog-max-len", "100000")
        redis_cli(srv, "SLOWLOG", "RESET")
        sampled = Sampled(srv)
        written = redis_pipe(srv, commands)
        answers, ms, lock = collections.Counter(), [], threading.Lock()

        def read(wave, i):
            # Each wave asks under its own alias: not an answer the response cache holds.
            query = f'query($id: ID!) {{ w{wave}: article(id: $id) {{ id title votes groups }} }}'
            started = time.monotonic()
            try:
                status, body = gql(srv, query, {"id": str(i)}, timeout=60)
                data = (parse(body) or {}).get("data") or {}
                answer = f"{code_of(body)} ({status})" if code_of(body) != "ok" else (
                    "data" if data.get(f"w{wave}") else "null")
            except NET_ERRORS as e:
                answer = type(e).__name__
            with lock:
                answers[answer] += 1
                ms.append((time.monotonic() - started) * 1000)

        for wave in range(waves):
            started = time.monotonic()
            threads = [threading.Thread(target=read, args=(wave, 1 + i % articles), daemon=True)
                       for i in range(readers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            time.sleep(max(0.0, 1 - (time.monotonic() - started)))
        settled = wait_idle(srv, 600)
        sampled.done()
        entries = subprocess.run(["redis-cli", "-s", srv.sock, "--json", "SLOWLOG", "GET", "100000"],
                                 capture_output=True, timeout=30).stdout
        try:
            scripts = sorted(e[2] / 1000 for e in json.loads(entries) if e[3][0].lower() == "evalsha")
        except (ValueError, TypeError, IndexError):
            scripts = [-1]
        scripts = scripts or [0]
        listed = redis_cli(srv, "HGET", f"article:{articles}", "groups").strip().count(",") + 1
        ordered = sorted(ms) or [0]
        name = f"{articles} articles × {groups:,} groups written directly, {readers} concurrent reads a second"
        rows.append((name + ": reads", ", ".join(f"{n} {k}" for k, n in answers.most_common()), "-",
                     f"{waves} waves; max {ordered[-1]:.0f} ms, p50 {ordered[len(ordered) // 2]:.0f} ms; "
                     f"written in {written:.1f} s"))
        rows.append((name + ": derivation", f"{len(scripts) if scripts != [0] else 0} scripts over 2 ms", "-",
                     f"longest {scripts[-1]:.1f} ms, median of those {scripts[len(scripts) // 2]:.1f} ms; "
                     f"derived {settled:.1f} s after the reads, article {articles} lists {listed:,} groups; "
                     f"peak RSS {sampled.rss:.0f} MiB; failed batches {deriver(srv).get('failures')}"))
    finally:
        stop(srv)


def voter_amplification(voters=200_000):
    """The book's votes of many voters on one article: what votegraph derives from them."""
    srv = start()
    try:
        now = time.time()
        token = sign_up(srv, "bystander")
        time.sleep(1)
        before = redis_used_memory(srv)
        commands = book_post(1, now)
        for v in range(voters):
            commands += [resp("SADD", "voted:1", f"user:v{v}"), resp("ZINCRBY", "score:", 432, "article:1"),
                         resp("HINCRBY", "article:1", "votes", 1)]
        written = redis_pipe(srv, commands)
        settled = wait_idle(srv, 600)
        after = redis_used_memory(srv)
        book = int(redis_cli(srv, "MEMORY", "USAGE", "voted:1", "SAMPLES", "0").strip() or 0)
        indexes = 0
        for line in redis_cli(srv, "INFO", "keyspace").splitlines():
            if line.startswith("db0:"):
                indexes = int(line.split("keys=")[1].split(",")[0])
        status, body = gql(srv, '{ article(id: "1") { votes } }', token=token)
        votes = ((parse(body) or {}).get("data") or {}).get("article", {}).get("votes")
        rows.append((f"book votes of {voters:,} voters on one article", f"Redis +{(after - before) / 2**20:.1f} MiB", "-",
                     f"the book's voted set {book / 2**20:.1f} MiB, so votegraph's share "
                     f"{(after - before - book) / max(book, 1):.1f}× it; {indexes:,} keys in all; votes {votes}; "
                     f"written {written:.1f} s, derived {settled:.1f} s later"))
    finally:
        stop(srv)


# --- 9. moderation: brigades and votes on removed articles -------------------

FLAG = 'mutation($id: ID!) { flag(articleId: $id, reason: "brigade") { id } }'
RESTORE = "mutation($id: ID!) { restoreArticle(articleId: $id) { id } }"
REMOVE = 'mutation($id: ID!) { removeArticle(articleId: $id, reason: "test") { id } }'
VOTE_DIRECTION = "mutation($id: ID!, $d: VoteDirection!) { vote(articleId: $id, direction: $d) { id } }"
SEEN_BY_MODERATORS = "query($id: ID!) { article(id: $id) { status flags } moderationQueue { edges { node { id } } } }"


def admin(srv, name):
    """A user made admin with the real `votegraph set-role`; their token."""
    token = sign_up(srv, name)
    env = dict(os.environ, REDIS_URL=f"redis+unix://{srv.sock}", RUST_LOG="warn")
    done = subprocess.run([BINARY, "set-role", name, "admin"], env=env, capture_output=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"set-role: {short(done.stderr.decode(errors='replace'))}")
    return token


def data_of(body, *path):
    value = parse(body) or {}
    for key in ("data", *path):
        value = (value or {}).get(key) if isinstance(value, dict) else None
    return value


def flag_all(srv, tokens, id_):
    """Each token flags article id_; (last status, last body)."""
    status, body = None, b""
    for token in tokens:
        status, body = gql(srv, FLAG, {"id": id_}, token)
        if code_of(body) != "ok":
            break
    return status, body


def standing(srv, id_, admin_token):
    """What readers and moderators see of article id_, in words."""
    _, shown = gql(srv, "query($id: ID!) { article(id: $id) { id } }", {"id": id_})
    _, moderated = gql(srv, SEEN_BY_MODERATORS, {"id": id_}, admin_token)
    article = data_of(moderated, "article") or {}
    queue = data_of(moderated, "moderationQueue", "edges") or []
    queued = any(e.get("node", {}).get("id") == id_ for e in queue)
    readers = "see it" if data_of(shown, "article") else "do not see it"
    return f"readers {readers}; status {article.get('status')}, flags {article.get('flags')}, queued {queued}"


def brigade_on(srv, label):
    """5 accounts signed up at once flag an admin's article, then again after a restore."""
    root = admin(srv, "root")
    id_ = post_article(srv, root, "the admin's notes")
    started = time.monotonic()
    brigade = [sign_up(srv, f"brigade{i}") for i in range(5)]
    made = time.monotonic() - started
    status, body = flag_all(srv, brigade, id_)
    rows.append((f"brigade ({label}): 5 accounts made in {made:.2f} s flag an admin's article", status,
                 code_of(body), standing(srv, id_, root)))
    status, body = gql(srv, RESTORE, {"id": id_}, root)
    restored = code_of(body)
    status, body = flag_all(srv, brigade, id_)
    rows.append((f"brigade ({label}): restoreArticle ({restored}), then the same 5 flag again", status,
                 code_of(body), standing(srv, id_, root)))


def brigade():
    srv = start({"VOTEGRAPH_RATE_FLAG": "1000000/60"})
    try:
        brigade_on(srv, "default floors")
    finally:
        stop(srv)
    # Floors at 0: every account has earned it, as aged accounts with karma would have.
    srv = start({"VOTEGRAPH_RATE_FLAG": "1000000/60", "VOTEGRAPH_FLAG_MIN_ACCOUNT_AGE_SECS": "0",
                 "VOTEGRAPH_FLAG_MIN_KARMA": "0"})
    try:
        brigade_on(srv, "floors at 0")
    finally:
        stop(srv)


def karma_of(srv, name):
    query = 'query($id: ID!) { node(id: $id) { ... on User { karma } } }'
    _, body = gql(srv, query, {"id": f"user:{name}"})
    return (data_of(body, "node") or {}).get("karma")


def removed_votes(srv):
    """A moderator's votes on a removed article: what its poster's karma shows meanwhile and after."""
    root = admin(srv, "root")
    alice = sign_up(srv, "alice")
    id_ = post_article(srv, alice, "alice's story")
    before = karma_of(srv, "alice")
    gql(srv, REMOVE, {"id": id_}, root)
    status, body = gql(srv, VOTE_DIRECTION, {"id": id_, "d": "UP"}, root)
    removed = karma_of(srv, "alice")
    gql(srv, RESTORE, {"id": id_}, root)
    restored = karma_of(srv, "alice")
    rows.append(("removed-votes: an admin upvotes a removed article", status, code_of(body),
                 f"poster's karma {before} before, {removed} while removed, {restored} after the restore"))
    gql(srv, REMOVE, {"id": id_}, root)
    status, body = gql(srv, VOTE_DIRECTION, {"id": id_, "d": "NONE"}, root)
    removed = karma_of(srv, "alice")
    gql(srv, RESTORE, {"id": id_}, root)
    rows.append(("removed-votes: the admin takes the vote back while it is removed again", status, code_of(body),
                 f"poster's karma {restored} before, {removed} while removed, {karma_of(srv, 'alice')} after"))


SET_ROLE = "mutation($n: String!, $r: Role!) { setRole(name: $n, role: $r) { role } }"


def demoted_admin(srv):
    """An admin bans x for 2 s, promotes x once it ends, then demotes x: what x's token can still do."""
    root = admin(srv, "chief")
    sign_up(srv, "xavier")
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2))
    ban = 'mutation($u: DateTime) { banUser(name: "xavier", reason: "test", until: $u) { banned } }'
    gql(srv, ban, {"u": until}, root)
    time.sleep(3.1)
    gql(srv, SET_ROLE, {"n": "xavier", "r": "ADMIN"}, root)
    _, body = gql(srv, LOG_IN, {"n": "xavier", "p": "password-1"})
    token = data_of(body, "logIn", "token")
    _, body = gql(srv, SET_ROLE, {"n": "xavier", "r": "MEMBER"}, root)
    said = data_of(body, "setRole", "role")
    status, body = gql(srv, SET_ROLE, {"n": "chief", "r": "MEMBER"}, token)
    _, me = gql(srv, "{ me { role } }", None, root)
    rows.append(("demoted admin: after an expired ban, x is promoted, logs in, is demoted, then demotes the admin",
                 status, code_of(body), f"demotion answered {said}; the admin is now {data_of(me, 'me', 'role')}"))
    status, body = gql(srv, SET_ROLE, {"n": "xavier", "r": "ADMIN"}, token)
    rows.append(("demoted admin: x's token promotes x again", status, code_of(body),
                 f"x is {data_of(body, 'setRole', 'role') or 'unchanged'}"))


class ClusterSite:
    """A 3+3 Redis Cluster (scripts/cluster.sh) and two votegraph instances on it."""

    def __init__(self):
        self.cluster = self.nodes = None
        self.instances = []

    def start(self):
        base = 20000 + free_port() % 20000
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster.sh")
        self.cluster = subprocess.Popen([script], env=dict(os.environ, PORT_BASE=str(base)),
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in self.cluster.stdout:
            if line.startswith("REDIS_CLUSTER_NODES="):
                self.nodes = line.strip().split("=", 1)[1]
                break
        if not self.nodes:
            raise RuntimeError("scripts/cluster.sh did not start a cluster")
        for _ in range(2):
            srv = Server({}, ())
            srv.port = free_port()
            env = dict(os.environ, **BASE_ENV, REDIS_CLUSTER_NODES=self.nodes,
                       VOTEGRAPH_BIND=f"127.0.0.1:{srv.port}")
            env.pop("REDIS_URL", None)
            srv.proc = subprocess.Popen([BINARY], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.instances.append(srv)
            wait_for_health(srv, within=30)
        return self

    def set_role(self, name, role):
        env = dict(os.environ, REDIS_CLUSTER_NODES=self.nodes, RUST_LOG="warn")
        env.pop("REDIS_URL", None)
        subprocess.run([BINARY, "set-role", name, role], env=env, capture_output=True, timeout=30, check=True)

    def primary_of(self, name):
        """The port of the primary holding user:<name>."""
        for addr in self.nodes.split(","):
            port = addr.rsplit(":", 1)[1]
            found = subprocess.run(["redis-cli", "-p", port, "keys", f"*}}user:{name}"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            if found:
                return port
        return None

    def stop(self):
        for srv in self.instances:
            if srv.proc.poll() is None:
                srv.proc.terminate()
                srv.proc.wait(timeout=30)
        if self.cluster and self.cluster.poll() is None:
            self.cluster.terminate()
            self.cluster.wait(timeout=30)


def admins_on_two_shards(site):
    """Two admin names whose accounts live on different primaries."""
    a, b = site.instances
    names = [f"admin{i}" for i in range(12)]
    for name in names:
        sign_up(a, name)
    homes = {name: site.primary_of(name) for name in names}
    first = names[0]
    second = next(n for n in names[1:] if homes[n] != homes[first])
    return first, second


def last_admin_race(rounds=20):
    """Two admins on different shards demote each other at once, through two instances."""
    site = ClusterSite()
    try:
        site.start()
        a, b = site.instances
        first, second = admins_on_two_shards(site)
        emptied = 0
        for _ in range(rounds):
            site.set_role(first, "admin")
            site.set_role(second, "admin")
            tokens = [data_of(gql(srv, LOG_IN, {"n": n, "p": "password-1"})[1], "logIn", "token")
                      for srv, n in ((a, first), (b, second))]
            race = [threading.Thread(target=gql, args=(srv, SET_ROLE, {"n": target, "r": "MEMBER"}, token))
                    for srv, target, token in ((a, second, tokens[0]), (b, first, tokens[1]))]
            for thread in race:
                thread.start()
            for thread in race:
                thread.join()
            roles = [data_of(gql(a, "query($id: ID!) { node(id: $id) { ... on User { role } } }",
                                 {"id": f"user:{n}"})[1], "node")
                     for n in (first, second)]
            if not any((r or {}).get("role") == "ADMIN" for r in roles):
                emptied += 1
        rows.append((f"last admin (cluster): {rounds} rounds of two admins on different shards demoting each other",
                     "-", "-", f"{emptied} of {rounds} rounds left no admin"))
    finally:
        site.stop()


# --- the run --------------------------------------------------------------------

def wanted(name):
    """Whether the ATTACKS variable (if set) names this group."""
    only = os.environ.get("ATTACKS")
    return not only or any(part in name for part in only.split(","))


def guard(name, attack, *args):
    """Runs one attack; its failure becomes one row and the run goes on."""
    if not wanted(name):
        return
    try:
        attack(*args)
    except Exception as e:  # noqa: BLE001 - any failure is a row
        rows.append((name, f"error: {short(f'{type(e).__name__}: {e}', 80)}", "-", "-"))


def on_misc_server(attacks):
    """A few small attacks sharing one server; one that kills it restarts it for the next."""
    attacks = [(name, attack) for name, attack in attacks if wanted(name)]
    if not attacks:
        return
    srv = start()
    try:
        for name, attack in attacks:
            guard(name, attack, srv)
            gone = down(srv)
            if gone:
                rows.append((name + ": afterwards", gone[0], "-", f"{gone[1]}; restarted"))
    finally:
        stop(srv)


def cell(value):
    return str(value).replace("|", "\\|").replace("\n", " ")


def main():
    global BINARY
    if len(sys.argv) > 1:
        BINARY = sys.argv[1]
    BINARY = os.path.abspath(BINARY)
    idle = {}
    started = time.monotonic()
    try:
        guard("older attacks", older_attacks, idle)
        guard("deep nesting", deep_nesting)
        guard("memory under concurrency", memory_under_concurrency, idle)
        on_misc_server([("logOut and WebSocket sessions", logout_ends_websockets)])
        guard("APQ (default limits)", persisted_queries, "default limits", {}, 300)
        lifted = {"VOTEGRAPH_RATE_PERSISTED_QUERY": "1000000/60", "VOTEGRAPH_RATE_PERSISTED_QUERY_SITE": "1000000/60"}
        guard("APQ (rate limits lifted)", persisted_queries, "rate limits lifted", lifted, 1000, 50)
        on_misc_server([("case twins", case_twins)])
        guard("subscription variants", subscription_variants)
        on_misc_server([("GET /health with one 100 KB header", big_header),
                        ('post with groups = 20 × "same"', duplicate_groups)])
        guard("GET /metrics behind a trusted proxy", metrics_behind_proxy)
        guard("never-reading WebSockets", never_reading_websockets)
        guard("book-style burst", book_burst)
        guard("thousands of groups", many_groups)
        guard("voter amplification", voter_amplification)
        guard("brigade", brigade)
        on_misc_server([("removed-votes", removed_votes), ("demoted admin", demoted_admin)])
        guard("last admin (cluster)", last_admin_race)
    finally:
        for srv in _servers:
            stop(srv)
    print(f"votegraph: {BINARY}")
    print()
    print("| attack | answer | code | detail |")
    print("| --- | --- | --- | --- |")
    for attack, answer, code, detail in rows:
        print(f"| {cell(attack)} | {cell(answer)} | {cell(code)} | {cell(detail)} |")
    print()
    fresh = f"{idle['fresh']:.0f} MiB" if "fresh" in idle else "-"
    seeded = f"{idle['seeded']:.0f} MiB" if "seeded" in idle else "-"
    print(f"server idle RSS: {fresh} just started, {seeded} with 100 articles served once")
    print(f"run time: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
