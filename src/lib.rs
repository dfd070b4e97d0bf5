//! votegraph: a GraphQL API for a community news site where people post
//! links, vote on them and read ranked front pages, with Redis as its only
//! database and the keyspace of *Redis in Action*, chapter 1.
//!
//! `main.rs` only parses [`config::Settings`] and runs a
//! [`startup::Application`]; everything else lives in this library so tests
//! and tools can start real servers. The modules form layers, each importing
//! only from those below it (docs/architecture.md); `layers.rs` fails on any
//! import cycle.

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
mod trusted;
mod ws;

/// What the benchmark and the tests reach: the Redis keys (to seed and
/// inspect), the article fields a page reads, a Redis URL's connection
/// details, the schema's SDL and a token's stored hash.
pub use auth::token_hash;
pub use graphql::sdl;
pub use store::{connection_info, keys, ARTICLE_FIELDS, DEFAULT_GROUP_SCAN_BUDGET};
