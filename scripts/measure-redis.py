#!/usr/bin/env python3
"""Measures what votegraph costs Redis, for docs/scaling.md: memory per
article and per vote, and Redis CPU per vote and per page read (from INFO
commandstats, so votegraph's own CPU is out of the picture).

Starts nothing: point it at a running votegraph and its (empty) Redis.

    redis-server --port 6398 --save "" --appendonly no &
    REDIS_URL=redis://127.0.0.1:6398 target/release/votegraph --bind 127.0.0.1:8010 \
        --rate-post 1000000/60 --rate-vote 1000000/60 --rate-sign-up 1000000/60 \
        --no-response-cache &
    scripts/measure-redis.py http://127.0.0.1:8010 6398

Standard library only (urllib and redis-cli)."""

import json
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

BASE, PORT = sys.argv[1], sys.argv[2]
ARTICLES, USERS, VOTERS, VOTED = 2000, 20, 100, 200


def gql(query, variables=None, token=None):
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(BASE + "/graphql", data=body, method="POST")
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("authorization", "Bearer " + token)
    with urllib.request.urlopen(request) as response:
        answer = json.load(response)
    if answer.get("errors"):
        raise SystemExit(f"GraphQL errors: {answer['errors']}")
    return answer["data"]


def redis(*args):
    return subprocess.run(
        ["redis-cli", "-p", PORT, *args], capture_output=True, text=True, check=True
    ).stdout


def used_memory():
    for line in redis("INFO", "memory").splitlines():
        if line.startswith("used_memory:"):
            return int(line.split(":")[1])
    raise SystemExit("no used_memory")


def redis_usec():
    """Total microseconds Redis spent in commands since the last RESETSTAT
    (scripts include the commands they call; those are not counted twice)."""
    total, inner = 0, 0
    for line in redis("INFO", "commandstats").splitlines():
        if not line.startswith("cmdstat_"):
            continue
        name, stats = line[len("cmdstat_"):].split(":", 1)
        fields = dict(kv.split("=") for kv in stats.split(","))
        if name in ("info", "config|resetstat"):
            continue
        if name in ("evalsha", "eval"):
            total += int(fields["usec"])
        else:
            inner += int(fields["usec"])
    return total, inner


def settle():
    """Waits for the deriver to finish deriving the writes just made (it
    follows votegraph's own writes too, a few milliseconds later), so its
    Redis time is counted with the writes that caused it."""
    time.sleep(0.1)
    for _ in range(100):
        with urllib.request.urlopen(BASE + "/health") as response:
            deriver = json.load(response).get("deriver")
        if not deriver or (deriver["pending"] == 0 and not deriver["busy"]):
            return
        time.sleep(0.05)


def sign_up(name):
    return gql(
        "mutation($n: String!) { signUp(name: $n, password: \"a long password\") { token } }",
        {"n": name},
    )["signUp"]["token"]


posters = [sign_up(f"poster{i}") for i in range(USERS)]
voters = [sign_up(f"voter{i}") for i in range(VOTERS)]
before = used_memory()
redis("CONFIG", "RESETSTAT")
for i in range(ARTICLES):
    gql(
        "mutation($t: String!, $l: String!) { post(title: $t, link: $l, groups: [\"news\"]) { id } }",
        {"t": f"Measured article {i}: notes on ranking things with sorted sets",
         "l": f"https://example.com/{i}"},
        posters[i % USERS],
    )
settle()
posted = used_memory()
scripts, _ = redis_usec()
print(f"articles: {ARTICLES}, {(posted - before) / ARTICLES:.0f} bytes each, "
      f"{scripts / ARTICLES:.1f} µs of Redis per post")

# The sweep re-checks a batch of articles every --top-upkeep-ms whatever
# happens (the whole store each round, at this size): its time is measured
# alone first and taken out of the votes' figure, which it would otherwise
# swell in proportion to how slowly this script votes.
redis("CONFIG", "RESETSTAT")
idle_start = time.monotonic()
time.sleep(5)
background, _ = redis_usec()
background_rate = background / (time.monotonic() - idle_start)
print(f"background (the sweep): {background_rate / 1000:.1f} ms of Redis per second")

redis("CONFIG", "RESETSTAT")
votes_start = time.monotonic()


def vote_all(numbered):
    v, token = numbered
    for k in range(VOTED):
        article = (v * 7 + k * 13) % ARTICLES + 1
        gql("mutation($id: ID!) { vote(articleId: $id) { id } }", {"id": str(article)}, token)
    return VOTED


# Sixteen voters at once keep Redis busy, as a primary near its capacity
# is: one vote at a time leaves it idle between votes, and each wakes to
# cold caches, which would be counted against the vote.
with ThreadPoolExecutor(16) as pool:
    votes = sum(pool.map(vote_all, enumerate(voters)))
settle()
voted = used_memory()
scripts, _ = redis_usec()
swept = background_rate * (time.monotonic() - votes_start)
print(f"votes: {votes}, {(voted - posted) / votes:.0f} bytes each, "
      f"{(scripts - swept) / votes:.1f} µs of Redis per vote (the vote script and the "
      f"deriver's check; {scripts / votes:.1f} with the sweep's background)")

fields = "id title link slug poster { name } postedAt votes downvotes score views groups"
for label, token, query in [
    ("front page (anonymous)", None, f"{{ articles(pageSize: 25) {{ {fields} }} }}"),
    ("front page (logged in, template missed)", voters[0], f"{{ articles(pageSize: 25) {{ {fields} myVote }} }}"),
    ("TOP_WEEK feed page", None, f"{{ feed(order: TOP_WEEK, first: 25) {{ edges {{ node {{ {fields} }} }} }} }}"),
]:
    redis("CONFIG", "RESETSTAT")
    for _ in range(500):
        gql(query, token=token)
    scripts, inner = redis_usec()
    print(f"{label}: {(scripts + inner) / 500:.1f} µs of Redis per page")
