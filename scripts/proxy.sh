#!/usr/bin/env bash
# Runs the nginx example (deploy/nginx/votegraph.conf) on loopback ports in
# front of a running votegraph, with a self-signed certificate made for the
# run, until Ctrl-C or SIGTERM. nginx is stopped on every way out (a signal,
# a failed start, an error in this script) and its files are removed.
#
#   scripts/serve.sh --trusted-proxies 127.0.0.1 &   # votegraph on 127.0.0.1:8000
#   scripts/proxy.sh                                  # https://127.0.0.1:8443
#   curl --cacert "$PROXY_DIR/cert.pem" https://127.0.0.1:8443/health
#
# Settings (environment): PROXY_HTTPS (127.0.0.1:8443), PROXY_HTTP
# (127.0.0.1:8080, redirects to https), UPSTREAM (votegraph, 127.0.0.1:8000),
# PROXY_DIR (where the certificate, config and logs go; a temporary
# directory, removed at the end, when unset).
set -euo pipefail
cd "$(dirname "$0")/.."
https=${PROXY_HTTPS:-127.0.0.1:8443}
http=${PROXY_HTTP:-127.0.0.1:8080}
upstream=${UPSTREAM:-127.0.0.1:8000}
scripts/ensure-nginx.sh
nginx=$(command -v nginx || echo /usr/sbin/nginx)

created=""
if [ -n "${PROXY_DIR:-}" ]; then
  dir=$PROXY_DIR
  mkdir -p "$dir"
else
  dir=$(mktemp -d)
  created=$dir
fi
dir=$(cd "$dir" && pwd)
nginx_pid=""
stop() {
  if [ -n "$nginx_pid" ] && kill -0 "$nginx_pid" 2>/dev/null; then
    kill -QUIT "$nginx_pid" 2>/dev/null || true # graceful: finish requests
    for _ in $(seq 50); do
      kill -0 "$nginx_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$nginx_pid" 2>/dev/null || true
    wait "$nginx_pid" 2>/dev/null || true
  fi
  if [ -n "$created" ]; then rm -rf "$created"; fi
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Workers drop to an unprivileged user when nginx runs as root; they only
# need to pass through this directory to their temp directories.
chmod 711 "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null

# The example with loopback ports, this run's certificate and no HSTS (a
# browser would remember it for localhost). Each edit must apply, so the
# script fails loudly if the example drifts.
example=deploy/nginx/votegraph.conf
edit() { # PATTERN REPLACEMENT
  grep -q -- "$1" "$dir/votegraph.conf" || { echo "proxy.sh: '$1' not found in $example" >&2; exit 1; }
  sed -i "s|$1|$2|" "$dir/votegraph.conf"
}
cp "$example" "$dir/votegraph.conf"
edit 'server 127.0.0.1:8000;' "server $upstream;"
edit 'listen 443 ssl http2;' "listen $https ssl http2;"
edit 'listen \[::\]:443 ssl http2;' ''
edit 'listen 80;' "listen $http;"
edit 'listen \[::\]:80;' ''
edit 'ssl_certificate     /etc/letsencrypt/live/news.example.org/fullchain.pem;' "ssl_certificate $dir/cert.pem;"
edit 'ssl_certificate_key /etc/letsencrypt/live/news.example.org/privkey.pem;' "ssl_certificate_key $dir/key.pem;"
edit 'add_header Strict-Transport-Security "max-age=31536000" always;' ''

cat >"$dir/nginx.conf" <<CONF
worker_processes 1;
pid $dir/nginx.pid;
error_log stderr warn;
events { worker_connections 512; }
http {
    access_log $dir/access.log;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    include $dir/votegraph.conf;
}
CONF
"$nginx" -t -q -e stderr -p "$dir" -c "$dir/nginx.conf"
"$nginx" -e stderr -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' &
nginx_pid=$!
echo "proxy.sh: https://$https and http://$http -> http://$upstream (certificate $dir/cert.pem); Ctrl-C stops it" >&2
wait "$nginx_pid"
