"""A TLS client for tests/api/proxy.rs, on Python's standard library only:
the Rust test crates have no TLS, and this speaks to nginx the way a
browser would, from a chosen loopback source address (so the proxy sees
distinct clients).

  proxy_client.py request URL --cacert PEM --source IP [--header K:V]... [--body JSON]
      one HTTPS request; prints {"status", "headers", "body"} as JSON.
  proxy_client.py subscribe URL --cacert PEM --source IP --query DOC [--header K:V]...
      a graphql-transport-ws subscription over wss://; prints {"ready": true}
      once subscribed, then the first `next` message's payload, and exits.
"""

import argparse
import base64
import hashlib
import http.client
import json
import os
import socket
import ssl
import struct
import sys
import urllib.parse

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def context(cacert):
    ctx = ssl.create_default_context(cafile=cacert)
    ctx.check_hostname = True
    return ctx


def headers_of(pairs):
    return dict(pair.split(":", 1) for pair in pairs)


def request(args):
    url = urllib.parse.urlsplit(args.url)
    conn = http.client.HTTPSConnection(
        url.hostname, url.port, context=context(args.cacert),
        source_address=(args.source, 0), timeout=15)
    headers = headers_of(args.header)
    method = "GET"
    body = None
    if args.body is not None:
        method = "POST"
        body = args.body.encode()
        headers.setdefault("content-type", "application/json")
    path = url.path + ("?" + url.query if url.query else "")
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    text = response.read().decode()
    print(json.dumps({
        "status": response.status,
        "headers": {k.lower(): v for k, v in response.getheaders()},
        "body": text,
    }))


class WebSocket:
    """Just enough of RFC 6455 for one text-message conversation."""

    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""

    def read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def send(self, opcode, payload):
        mask = os.urandom(4)
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def send_json(self, message):
        self.send(0x1, json.dumps(message).encode())

    def next_json(self):
        while True:
            first, second = self.read(2)
            opcode = first & 0x0F
            n = second & 0x7F
            if n == 126:
                n = struct.unpack(">H", self.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self.read(8))[0]
            payload = self.read(n)
            if opcode == 0x9:  # ping: answer, keep reading
                self.send(0xA, payload)
            elif opcode == 0x8:
                raise EOFError("closed by the server: %r" % payload[2:])
            elif opcode == 0x1:
                message = json.loads(payload)
                if message.get("type") not in ("ping", "pong"):
                    return message


def subscribe(args):
    url = urllib.parse.urlsplit(args.url)
    raw = socket.create_connection(
        (url.hostname, url.port), timeout=15, source_address=(args.source, 0))
    sock = context(args.cacert).wrap_socket(raw, server_hostname=url.hostname)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        "GET %s HTTP/1.1" % (url.path or "/"),
        "Host: %s:%d" % (url.hostname, url.port),
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: " + key,
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Protocol: graphql-transport-ws",
    ] + ["%s: %s" % (k, v.strip()) for k, v in headers_of(args.header).items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            raise EOFError("no upgrade response")
        head += chunk
    status, *fields = head.decode().split("\r\n")
    if " 101 " not in status + " ":
        raise SystemExit("upgrade refused: " + head.decode())
    fields = {k.lower(): v.strip() for k, v in (f.split(":", 1) for f in fields if ":" in f)}
    accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    assert fields.get("sec-websocket-accept") == accept, fields
    assert fields.get("sec-websocket-protocol") == "graphql-transport-ws", fields
    ws = WebSocket(sock)
    ws.send_json({"type": "connection_init", "payload": {}})
    ack = ws.next_json()
    assert ack["type"] == "connection_ack", ack
    ws.send_json({"type": "subscribe", "id": "1", "payload": {"query": args.query}})
    print(json.dumps({"ready": True, "request_id": fields.get("x-request-id")}), flush=True)
    message = ws.next_json()
    print(json.dumps(message), flush=True)
    ws.send(0x8, struct.pack(">H", 1000))
    sock.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["request", "subscribe"])
    parser.add_argument("url")
    parser.add_argument("--cacert", required=True)
    parser.add_argument("--source", default="127.0.0.1")
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--body")
    parser.add_argument("--query")
    args = parser.parse_args()
    {"request": request, "subscribe": subscribe}[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
