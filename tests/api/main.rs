//! Integration tests: a real redis-server per test, the real server on port
//! 0, spoken to over HTTP.

mod abuse;
mod article_posted;
mod articles;
mod auth;
mod batching;
mod book;
mod browser;
mod cache;
mod directory;
mod failover;
mod feed;
mod graphiql;
mod groups;
mod helpers;
mod http;
mod http_cache;
mod karma;
mod load_balancer;
mod logs;
mod metrics;
mod my_vote;
mod persisted;
mod personal;
mod proxy;
mod rate_limits;
mod resilience;
mod schema;
mod server;
mod shared_subscriptions;
mod slugs;
mod subscriptions;
mod validation;
mod voting;
mod ws;
mod ws_protocol;
