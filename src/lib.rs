//! votegraph: a GraphQL API for a community news site where people post
//! links, vote on them and read ranked front pages, with Redis as its only
//! database and the keyspace of *Redis in Action*, chapter 1.
//!
//! This crate is the top layer: HTTP and WebSockets, CORS, GraphiQL,
//! `/metrics`, the flags and startup, over `votegraph-api`,
//! `votegraph-store` and `votegraph-domain` (docs/architecture.md).
//! `main.rs` only parses [`config::Settings`] and runs a
//! [`startup::Application`]; everything else lives in this library so tests
//! and tools can start real servers.

pub mod admin;
pub mod config;
mod cors;
mod graphiql;
mod http;
mod metrics;
mod scrape;
mod server;
pub mod startup;
pub mod telemetry;
mod ws;

/// The layers below, by the names this crate's code calls them.
use votegraph_api::{
    auth, budget, cache, compression, graphql, persisted, pipeline, state, trusted,
};
use votegraph_domain as domain;
use votegraph_domain::{client_addr, error, rate};
use votegraph_store as store;
use votegraph_store::{local_redis, pubsub, sessions};
