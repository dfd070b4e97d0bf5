//! The Redis layer of votegraph: the book-compatible keyspace, the Lua
//! scripts that keep it consistent, the connections (one server, replicas,
//! or a cluster's shards and the outbox between them), pub/sub events, the
//! watch on ended sessions, and the `redis-server` processes votegraph can
//! start itself.
//!
//! Callers reach Redis only through [`Store`]'s methods; nothing above
//! builds a Redis command. This crate knows no HTTP and no GraphQL.

pub mod local_redis;
pub mod pubsub;
pub mod redis_server;
pub mod sessions;
mod store;

/// The lower layer, by the name this crate's code calls it.
use votegraph_domain as domain;
use votegraph_domain::{client_addr, error, metrics, rate};

pub use store::*;
