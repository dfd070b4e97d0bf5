# votegraph's image: `docker build -t votegraph .`, then run it with a Redis
# of its own (docker-compose.yml does both). Configured only through the
# environment variables of docs/configuration.md; no Redis inside.
#
# Stages: `build` compiles the server in the Rust image; `server` is Debian
# slim with curl for the health check, an unprivileged user and the
# settings of the image, without the binary; `runtime`, the image, adds the
# binary from `build`. `prebuilt` adds instead a binary found in the build
# context, for checks on machines without the Rust image
# (scripts/container-check.sh). RUST_IMAGE and RUNTIME_BASE choose the
# base images.
ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_BASE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# Without its debug info the binary is a quarter of the size; its symbols
# stay, for backtraces.
RUN cargo build --release --locked --package votegraph --bin votegraph \
    && strip --strip-debug -o /votegraph target/release/votegraph

FROM ${RUNTIME_BASE} AS server
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && useradd --user-group --uid 10001 --home-dir /nonexistent \
        --no-create-home --shell /usr/sbin/nologin votegraph
USER 10001:10001
# Reachable from outside the container; the health check reaches this port
# on loopback. Redis is the container named `redis`, as in the compose file.
ENV VOTEGRAPH_BIND=0.0.0.0:8000 \
    REDIS_URL=redis://redis:6379/0
EXPOSE 8000
# SIGTERM starts the drain (VOTEGRAPH_SHUTDOWN_GRACE_MS), then in-flight
# requests finish: give `docker stop` a timeout above both (compose:
# stop_grace_period).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD curl -fsS -o /dev/null "http://127.0.0.1:${VOTEGRAPH_BIND##*:}/health" || exit 1
ENTRYPOINT ["/usr/local/bin/votegraph"]

FROM server AS prebuilt
COPY votegraph /usr/local/bin/votegraph

FROM server AS runtime
COPY --from=build /votegraph /usr/local/bin/votegraph
