#!/usr/bin/env bash
# Throughput of 1 vs 2 votegraph instances behind HAProxy (the shipped
# deploy/haproxy/votegraph.cfg): the uncached front page by GET, with
# ApacheBench (apache2-utils), 64 keep-alive clients, 8 s, twice each; and
# one instance without the proxy. Needs a release build. Everything it
# starts is stopped on every way out. For docs/scaling.md.
set -u
cd "$(dirname "$0")/.."
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
redis-server --port 6397 --save "" --appendonly no >/dev/null 2>&1 &
pids+=($!)
sleep 0.5
export REDIS_URL=redis://127.0.0.1:6397
for i in 1 2; do
  target/release/votegraph --bind 127.0.0.1:801$i --no-response-cache --rate-post 1000000/60 --rate-sign-up 1000000/60 >/dev/null 2>&1 &
  pids+=($!)
done
sleep 1
tok=$(curl -s -X POST -H 'content-type: application/json' -d '{"query":"mutation { signUp(name: \"alice\", password: \"a long password\") { token } }"}' http://127.0.0.1:8011/graphql | sed 's/.*"token":"\([^"]*\)".*/\1/')
for i in $(seq 1 100); do curl -s -o /dev/null -X POST -H 'content-type: application/json' -H "authorization: Bearer $tok" -d "{\"query\":\"mutation { post(title: \\\"article $i\\\", link: \\\"https://example.com/$i\\\") { id } }\"}" http://127.0.0.1:8011/graphql; done
q='/graphql?query=%7Barticles(pageSize%3A25)%7Bid%20title%20link%20votes%20score%20postedAt%20poster%7Bname%7D%7D%7D'
run() { # $1 label, $2 backend2
  LB_BIND=127.0.0.1:8090 VOTEGRAPH_1=127.0.0.1:8011 VOTEGRAPH_2=$2 haproxy -f deploy/haproxy/votegraph.cfg -db >/dev/null 2>&1 &
  hp=$!
  pids+=($hp)
  sleep 1.5
  for r in 1 2; do
    echo -n "$1 run $r: "; ab -k -q -c 64 -t 8 -n 10000000 "http://127.0.0.1:8090$q" 2>/dev/null | grep -E "Requests per second|Failed requests" | tr '\n' ' '; echo
  done
  kill $hp; wait $hp 2>/dev/null
}
# One instance: the second server line points at the same instance.
run "1 instance " 127.0.0.1:8011
run "2 instances" 127.0.0.1:8012
echo -n "direct, no proxy: "; ab -k -q -c 64 -t 8 -n 10000000 "http://127.0.0.1:8011$q" 2>/dev/null | grep -E "Requests per second" 
