//! Runtime configuration, from command-line flags or the environment.
//!
//! Every setting has a default that gives a working server on a developer's
//! machine, so `cargo run` needs no flags at all.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "votegraph",
    version,
    about = "GraphQL API for a community news site, on Redis"
)]
pub struct Settings {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "VOTEGRAPH_BIND", default_value = "127.0.0.1:8000")]
    pub bind: String,

    /// Redis to use, e.g. `redis://127.0.0.1:6379/0` or `redis+unix:///run/redis.sock`.
    /// When unset, votegraph runs its own `redis-server` in `--data-dir`.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<String>,

    /// Where the self-managed `redis-server` keeps its data (only without REDIS_URL).
    #[arg(long, env = "VOTEGRAPH_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,

    /// The `redis-server` program to start when REDIS_URL is unset.
    #[arg(long, env = "VOTEGRAPH_REDIS_SERVER", default_value = "redis-server")]
    pub redis_server: String,

    /// Most Redis connections in the pool (each one is multiplexed).
    #[arg(long, env = "VOTEGRAPH_POOL_SIZE", default_value_t = 8)]
    pub pool_size: u32,

    /// How long a request waits for a pooled connection before failing with
    /// "storage unavailable", in milliseconds.
    #[arg(long, env = "VOTEGRAPH_POOL_TIMEOUT_MS", default_value_t = 1000)]
    pub pool_timeout_ms: u64,

    /// Origins allowed to call the API from a browser, comma-separated; `*`
    /// allows any origin. Empty: no cross-origin access.
    #[arg(
        long,
        env = "VOTEGRAPH_CORS_ORIGINS",
        value_delimiter = ',',
        default_value = "*"
    )]
    pub cors_origins: Vec<String>,

    /// Load a page's articles one round trip at a time, in sequence (the N+1
    /// pattern), instead of one pipelined batch. Only for benchmarks.
    #[arg(long, env = "VOTEGRAPH_NO_BATCHING")]
    pub no_batching: bool,

    /// Seconds between keep-alives on idle subscription WebSockets.
    #[arg(long, env = "VOTEGRAPH_WS_KEEPALIVE_SECS", default_value_t = 15)]
    pub ws_keepalive_secs: u64,

    /// Seconds a new WebSocket has to send `connection_init` before it is
    /// closed with 4408, so idle unauthenticated sockets cannot pile up.
    #[arg(long, env = "VOTEGRAPH_WS_INIT_TIMEOUT_SECS", default_value_t = 10)]
    pub ws_init_timeout_secs: u64,

    /// Largest WebSocket message (and frame) accepted from a client, in
    /// bytes; larger ones close the connection with 1009 before they are
    /// buffered. Subscription documents are small; this bounds the memory
    /// one client can make the server hold.
    #[arg(long, env = "VOTEGRAPH_WS_MAX_MESSAGE_BYTES", default_value_t = 65_536)]
    pub ws_max_message_bytes: usize,

    /// Operations (usually subscriptions) one WebSocket may run at once;
    /// each costs a broadcast receiver and per-event work, so one client
    /// cannot multiply the server's fan-out at will.
    #[arg(long, env = "VOTEGRAPH_WS_MAX_SUBSCRIPTIONS", default_value_t = 20)]
    pub ws_max_subscriptions: usize,

    /// Concurrent WebSockets one client address may hold; further upgrades
    /// get HTTP 429, so one client cannot exhaust the server's sockets.
    #[arg(
        long,
        env = "VOTEGRAPH_WS_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 16
    )]
    pub ws_max_connections_per_client: usize,

    /// Seconds a write to a WebSocket may take; a client that stops reading
    /// fills the buffers and is then dropped with its subscriptions, instead
    /// of holding them (and their buffers) forever.
    #[arg(long, env = "VOTEGRAPH_WS_SEND_TIMEOUT_SECS", default_value_t = 10)]
    pub ws_send_timeout_secs: u64,

    /// Membership checks a group page may spend walking the global ranking
    /// when the group's own ranking is not cached; beyond it the ranking is
    /// built with ZINTERSTORE (0: always build it, as the book does).
    #[arg(long, env = "VOTEGRAPH_GROUP_SCAN_BUDGET", default_value_t = 5_000)]
    pub group_scan_budget: u32,

    /// Do not cache anonymous query responses (see `cache.rs`); for
    /// measurements.
    #[arg(long, env = "VOTEGRAPH_NO_RESPONSE_CACHE")]
    pub no_response_cache: bool,

    /// logIn attempts one user name gets per window (successful ones reset
    /// the count); further attempts fail with RATE_LIMITED.
    #[arg(long, env = "VOTEGRAPH_LOGIN_ATTEMPTS", default_value_t = 10)]
    pub login_attempts: u32,

    /// Length of the logIn attempt window, in seconds.
    #[arg(long, env = "VOTEGRAPH_LOGIN_WINDOW_SECS", default_value_t = 900)]
    pub login_window_secs: u64,

    /// Argon2 memory cost in KiB (OWASP's recommended minimum by default).
    #[arg(long, env = "VOTEGRAPH_ARGON2_MEMORY_KIB", default_value_t = 19_456)]
    pub argon2_memory_kib: u32,

    /// Argon2 iterations.
    #[arg(long, env = "VOTEGRAPH_ARGON2_ITERATIONS", default_value_t = 2)]
    pub argon2_iterations: u32,
}

impl Settings {
    /// Settings for tests and tools: every default, the given Redis and bind.
    pub fn for_redis(redis_url: &str) -> Self {
        let mut s = Self::parse_from(["votegraph"]);
        s.redis_url = Some(redis_url.to_owned());
        s.bind = "127.0.0.1:0".to_owned();
        s
    }

    pub fn login_limit(&self) -> crate::store::LoginLimit {
        crate::store::LoginLimit {
            attempts: self.login_attempts.max(1),
            window_secs: self.login_window_secs.max(1),
        }
    }

    /// The WebSocket limits, each at least 1 (0 would refuse everything).
    pub fn ws_limits(&self) -> crate::ws::Limits {
        crate::ws::Limits {
            keep_alive: Duration::from_secs(self.ws_keepalive_secs.max(1)),
            init_timeout: Duration::from_secs(self.ws_init_timeout_secs.max(1)),
            send_timeout: Duration::from_secs(self.ws_send_timeout_secs.max(1)),
            max_message_bytes: self.ws_max_message_bytes.max(1),
            max_subscriptions: self.ws_max_subscriptions.max(1),
            max_connections_per_client: self.ws_max_connections_per_client.max(1),
        }
    }

    pub fn pool_timeout(&self) -> Duration {
        Duration::from_millis(self.pool_timeout_ms)
    }
}
