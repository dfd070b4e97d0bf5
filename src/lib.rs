//! votegraph: a GraphQL API for a community news site where people post
//! links, vote on them and read ranked front pages, with Redis as its only
//! database and the keyspace of *Redis in Action*, chapter 1.
//!
//! `main.rs` only parses [`config::Settings`] and runs a
//! [`startup::Application`]; everything else lives in this library so tests
//! and tools can start real servers.
//!
//! # Layers
//!
//! A request walks down, and every module imports only from the layers
//! below its own (a test, `layers.rs`, fails on any import cycle):
//!
//! 1. **startup**: `startup` (builds and runs the application), `scrape`
//!    (what `/metrics` reads from each part), `config` (flags, turned into
//!    each part's own settings), `admin` (`votegraph set-role`),
//!    `local_redis`, `redis_server`.
//! 2. **HTTP and WebSocket**: `server` (the accept loop), `http` (the
//!    route tree: `/graphql` over HTTP, content negotiation, bodies,
//!    caching headers, `/health`), `ws` (the WebSocket upgrade and the
//!    GraphQL-over-WebSocket protocol), `sessions` (ended logins close
//!    their sockets), `telemetry` (request ids, the access log, request
//!    metrics), `cors`, `graphiql`, `compression`, `metrics` (the registry
//!    and its exposition).
//! 3. **request pipeline**: `pipeline` (one request from its parsed form to
//!    its answer), `persisted` (automatic persisted queries), `cache` (the
//!    response cache), `templates` (cached pages as templates: filled per
//!    reader), `budget` (the work in flight).
//! 4. **GraphQL**: `graphql` (schema, resolvers, limits, the executor,
//!    shared subscriptions) over `graphql::context` (the request context
//!    resolvers go through), and `state` (what every request shares).
//! 5. **store**: `store` (every Redis read and write, the keys and the Lua
//!    scripts), `pubsub` (the process' one pub/sub connection), `auth`.
//! 6. **bottom**: `domain` (parse-don't-validate newtypes), `error` (the
//!    one error type and its codes), `rate` (rate limits), `client_addr`.

pub mod admin;
mod auth;
mod budget;
mod cache;
mod client_addr;
mod compression;
pub mod config;
mod cors;
mod domain;
mod error;
mod graphiql;
mod graphql;
mod http;
#[cfg(test)]
mod layers;
mod local_redis;
mod metrics;
mod persisted;
mod pipeline;
mod pubsub;
mod rate;
pub mod redis_server;
mod scrape;
mod server;
mod sessions;
pub mod startup;
mod state;
mod store;
pub mod telemetry;
mod templates;
mod ws;

/// What the benchmark and the tests reach: the Redis keys (to seed and
/// inspect), the article fields a page reads, a Redis URL's connection
/// details, the schema's SDL and a token's stored hash.
pub use auth::token_hash;
pub use graphql::sdl;
pub use store::{connection_info, keys, ARTICLE_FIELDS, DEFAULT_GROUP_SCAN_BUDGET};
