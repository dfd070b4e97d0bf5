//! Integration tests: a real redis-server per test, the real server on port
//! 0, spoken to over HTTP.

mod abuse;
mod articles;
mod auth;
mod batching;
mod book;
mod browser;
mod cache;
mod graphiql;
mod groups;
mod helpers;
mod karma;
mod logs;
mod metrics;
mod proxy;
mod rate_limits;
mod resilience;
mod schema;
mod server;
mod slugs;
mod subscriptions;
mod validation;
mod voting;
mod ws;
mod ws_protocol;
