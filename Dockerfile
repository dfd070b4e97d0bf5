# votegraph's image: `docker build -t votegraph .`, then run it with a Redis
# of its own (docker-compose.yml does both). Configured only through the
# environment variables of docs/configuration.md; no Redis inside.
#
# Stages: `build` compiles the server in the Rust image; `runtime` is Debian
# slim with the binary, curl for the health check and an unprivileged user.
# Build arguments choose the images: BINARY_FROM is the stage or image whose
# /votegraph is copied in (scripts/container-check.sh gives one holding a
# binary built on the host), RUNTIME_BASE the runtime stage's base.
ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_BASE=debian:bookworm-slim
ARG BINARY_FROM=build

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --package votegraph --bin votegraph \
    && cp target/release/votegraph /votegraph

FROM ${BINARY_FROM} AS binary

FROM ${RUNTIME_BASE} AS runtime
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && useradd --user-group --uid 10001 --home-dir /nonexistent \
        --no-create-home --shell /usr/sbin/nologin votegraph
COPY --from=binary /votegraph /usr/local/bin/votegraph
USER 10001:10001
# Reachable from outside the container; the health check reaches this port
# on loopback.
ENV VOTEGRAPH_BIND=0.0.0.0:8000
EXPOSE 8000
# SIGTERM starts the drain (VOTEGRAPH_SHUTDOWN_GRACE_MS), then in-flight
# requests finish: give `docker stop` a timeout above both (compose:
# stop_grace_period).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD curl -fsS -o /dev/null "http://127.0.0.1:${VOTEGRAPH_BIND##*:}/health" || exit 1
ENTRYPOINT ["/usr/local/bin/votegraph"]
