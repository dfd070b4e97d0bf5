//! The bottom layer of votegraph: what every other layer speaks in. The
//! parsed input types (titles, links, names, roles…), the one error type
//! [`error::AppError`] and its codes, rate limits, the client's address,
//! and the metrics registry each layer registers its metrics on.
//!
//! Nothing here talks to Redis or to the network. With the `graphql`
//! feature, the enums are GraphQL enums and errors become GraphQL errors
//! with their `extensions.code`; without it the crate has no GraphQL or
//! HTTP-server dependency.

pub mod client_addr;
mod domain;
pub mod error;
pub mod metrics;
pub mod rate;

pub use domain::*;
