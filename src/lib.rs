//! votegraph: a GraphQL API for a community news site where people post
//! links, vote on them and read ranked front pages, with Redis as its only
//! database and the keyspace of *Redis in Action*, chapter 1.
//!
//! `main.rs` only parses [`config::Settings`] and runs a
//! [`startup::Application`]; everything else lives in this library so tests
//! and tools can start real servers.

pub mod auth;
pub mod budget;
pub mod cache;
pub mod client;
pub mod compression;
pub mod config;
pub mod cors;
pub mod domain;
pub mod error;
pub mod graphiql;
pub mod graphql;
pub mod local_redis;
pub mod metrics;
pub mod persisted;
pub mod personal;
pub mod pipeline;
pub mod pubsub;
pub mod rate;
pub mod routes;
pub mod scrape;
pub mod server;
pub mod sessions;
pub mod startup;
pub mod store;
mod sync;
pub mod telemetry;
pub mod ws;
