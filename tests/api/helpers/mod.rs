//! Helpers for the API tests, by topic; tests use them through the
//! re-exports below (`use crate::helpers::{…}`).

mod app;
mod binary;
mod book;
mod cluster;
mod graphql;
mod moderation;
mod programs;
mod redis;
mod time;
mod ws;

pub use self::app::{
    health_at, spawn_app, spawn_app_on, spawn_app_tending, spawn_app_with, spawn_server,
    spawn_server_until, test_settings, test_settings_for, wait_for_first_pass,
    wait_for_subscriptions_at, Instance, Subscriptions, TestApp,
};
pub use self::binary::{free_port, Binary};
pub use self::book::Book;
pub use self::cluster::TestCluster;
pub use self::graphql::{error_code, gql_at, ids, sign_up_at, ARTICLE_FIELDS, VOTE_AS};
pub use self::moderation::{set_role_cli, set_role_on_cluster, Moderated};
pub use self::programs::{needed, python, Program};
pub use self::redis::{
    command_calls, command_stats, info_field, kill_pubsub_connections, pause_redis,
    reads_processed, reset_command_stats, wait_for_top_index, TestRedis,
};
pub use self::time::{done_if, eventually, eventually_every, now, poll_until, POLL};
pub use self::ws::{ws_request, Seen, WsClient, LEGACY_WS, TRANSPORT_WS};
