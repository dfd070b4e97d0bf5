//! The GraphQL layer of votegraph: the schema and its resolvers, the
//! request context they read and write through, document limits, persisted
//! and trusted documents, the response cache and its compression, sessions
//! and password hashing, the work budget, and the pipeline that takes one
//! request through all of them.
//!
//! It turns a GraphQL request into a response body and knows no HTTP
//! server: the `votegraph` crate owns the transport (HTTP, WebSockets) and
//! calls in through [`pipeline`] and [`graphql::Api`].

pub mod auth;
pub mod budget;
pub mod cache;
pub mod compression;
pub mod graphql;
pub mod persisted;
pub mod pipeline;
pub mod state;
mod templates;
pub mod trusted;

/// The lower layers, by the names this crate's code calls them.
use votegraph_domain as domain;
use votegraph_domain::{client_addr, error, rate};
use votegraph_store as store;
use votegraph_store::pubsub;
