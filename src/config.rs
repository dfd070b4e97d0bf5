//! Runtime configuration, from command-line flags or the environment.
//!
//! Every setting has a default that gives a working server on a developer's
//! machine, so `cargo run` needs no flags at all.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use anyhow::Context as _;

use crate::client_addr::TrustedProxies;
use crate::domain::Role;
pub use crate::rate::{RateLimit, RateLimits};
use crate::store::Locator;

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

    /// Log lines as `text` (for people) or `json` (one object per line,
    /// for log shippers).
    #[arg(long, env = "VOTEGRAPH_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: crate::telemetry::LogFormat,

    /// A second listener that serves only `GET /metrics`, to anyone who can
    /// reach it (e.g. `10.0.0.5:9464` on a private network). Without it,
    /// `/metrics` on `--bind` answers only clients on this machine that
    /// did not come through a proxy.
    #[arg(long, env = "VOTEGRAPH_METRICS_BIND")]
    pub metrics_bind: Option<String>,

    /// Serve `/metrics` on `--bind` to clients on this machine even with
    /// `--trusted-proxies` set. Without this, behind trusted proxies the
    /// API port answers `/metrics` with 404: a local proxy that forwards
    /// without a forwarding header would expose it. Use `--metrics-bind`.
    #[arg(long, env = "VOTEGRAPH_METRICS_ON_API_PORT")]
    pub metrics_on_api_port: bool,

    /// Redis to use, e.g. `redis://127.0.0.1:6379/0` or `redis+unix:///run/redis.sock`.
    /// When unset, votegraph runs its own `redis-server` in `--data-dir`.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<String>,

    /// Redis Sentinel: the sentinels' `host:port`, comma-separated. With
    /// `--redis-master-name`, used instead of REDIS_URL: the primary is
    /// asked of them for every new connection, so votegraph follows a
    /// failover by itself.
    #[arg(long, env = "REDIS_SENTINELS")]
    pub redis_sentinels: Option<String>,

    /// A read replica, e.g. `redis://10.0.0.12:6379`: anonymous queries
    /// read the site's rankings and articles from it; logged-in readers,
    /// writes, group and user pages and subscriptions use the primary.
    #[arg(long, env = "REDIS_REPLICA_URL")]
    pub redis_replica_url: Option<String>,

    /// The master name the sentinels monitor (with `--redis-sentinels`).
    #[arg(long, env = "REDIS_MASTER_NAME")]
    pub redis_master_name: Option<String>,

    /// Writes (post, vote, set groups, rename slug, view, sign up) answer
    /// only once this many replicas have them: `WAIT` in the write's own
    /// pipeline. 0 answers once the primary has them.
    #[arg(long, env = "VOTEGRAPH_WAIT_REPLICAS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=16))]
    pub wait_replicas: u32,

    /// How long (milliseconds) a write waits for `--wait-replicas` before
    /// it answers `NOT_REPLICATED`.
    #[arg(long, env = "VOTEGRAPH_WAIT_TIMEOUT_MS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub wait_timeout_ms: u64,

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

    /// Distinct subscription streams run once and shared by all their
    /// subscribers (a subscription that cannot depend on its caller, keyed
    /// by document, operation name and variables). Past it a new one runs
    /// unshared, as every subscription once did; 0 shares none.
    #[arg(long, env = "VOTEGRAPH_WS_MAX_SHARED_STREAMS", default_value_t = 1_000)]
    pub ws_max_shared_streams: usize,

    /// Membership checks a group page may spend walking the global ranking
    /// when the group's own ranking is not cached; beyond it the ranking is
    /// built with ZINTERSTORE (0: always build it, as the book does).
    #[arg(long, env = "VOTEGRAPH_GROUP_SCAN_BUDGET", default_value_t = 5_000)]
    pub group_scan_budget: u32,

    /// Copy every vote of the open voting window from the voted sets into
    /// the per-user vote indexes at startup, even when that was done
    /// before (in the background; the server serves meanwhile). Votes
    /// written by the book's code after the first pass show as NONE in
    /// `myVote` until this runs (see docs/api.md, Voting).
    #[arg(long, env = "VOTEGRAPH_RECONCILE_VOTES")]
    pub reconcile_votes: bool,

    /// On SIGTERM or Ctrl-C, how long (milliseconds, 0–60000) to keep
    /// serving while `/health` answers 503 `draining`, before the listener
    /// closes: a load balancer's health check takes the instance out
    /// first, so stopping it costs no request. Set it above the balancer's
    /// check interval × its fall count.
    #[arg(long, env = "VOTEGRAPH_SHUTDOWN_GRACE_MS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub shutdown_grace_ms: u64,

    /// How often (milliseconds, 100–60000) each instance tends the
    /// `TOP_*` rankings: prunes articles too old for a period and
    /// re-derives 1,000 open articles' net votes from `score:` and `time:`
    /// (how votes written by the book's code reach the `TOP_*` orders).
    #[arg(long, env = "VOTEGRAPH_TOP_UPKEEP_MS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub top_upkeep_ms: u64,

    /// Do not cache anonymous query responses (see `cache/`); for
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

    /// Proxies whose `X-Forwarded-For` / `Forwarded` headers name the client
    /// (comma-separated IPs or CIDR networks, e.g. `10.0.0.0/8,::1`). Empty:
    /// the socket's peer is the client and those headers are ignored.
    #[arg(long, env = "VOTEGRAPH_TRUSTED_PROXIES", default_value = "")]
    pub trusted_proxies: TrustedProxies,

    /// signUps per client address (COUNT/SECONDS). A household or office
    /// behind one address rarely opens more than a few accounts an hour,
    /// while a script that could mint accounts freely would multiply every
    /// per-user limit below.
    #[arg(long, env = "VOTEGRAPH_RATE_SIGN_UP", default_value = "5/3600")]
    pub rate_sign_up: RateLimit,

    /// logIn attempts per client address, on top of `--login-attempts` per
    /// name. Three names' worth of attempts per window, so a few people
    /// behind one NAT mistyping passwords get through, while one address
    /// guessing across many names is held to 120 attempts an hour.
    #[arg(long, env = "VOTEGRAPH_RATE_LOG_IN", default_value = "30/900")]
    pub rate_log_in: RateLimit,

    /// Counted `viewArticle`s per user, or per client address when not
    /// logged in. Two new articles a second is more than anyone reads; the
    /// limit keeps a script from inflating view counts. Repeated views of
    /// one article within `--view-window-secs` are not counted, so they do
    /// not use this budget either.
    #[arg(long, env = "VOTEGRAPH_RATE_VIEW", default_value = "120/60")]
    pub rate_view: RateLimit,

    /// Posts per user. More than ten links an hour is a spammer's pace, not a
    /// reader sharing finds.
    #[arg(long, env = "VOTEGRAPH_RATE_POST", default_value = "10/3600")]
    pub rate_post: RateLimit,

    /// Votes per user (every direction, no-ops included). Two a second
    /// lets someone vote down a front page as fast as they can click.
    #[arg(long, env = "VOTEGRAPH_RATE_VOTE", default_value = "120/60")]
    pub rate_vote: RateLimit,

    /// setGroups calls per user: room for tidying one's articles in a
    /// burst, not for churning group rankings in a loop.
    #[arg(long, env = "VOTEGRAPH_RATE_SET_GROUPS", default_value = "30/60")]
    pub rate_set_groups: RateLimit,

    /// renameSlug calls per user. A slug is a URL people link to, so renaming
    /// is rare; each rename also frees and takes entries in `slug.to.id`.
    #[arg(long, env = "VOTEGRAPH_RATE_RENAME_SLUG", default_value = "10/3600")]
    pub rate_rename_slug: RateLimit,

    /// flag and unflag calls per user.
    #[arg(long, env = "VOTEGRAPH_RATE_FLAG", default_value = "20/3600")]
    pub rate_flag: RateLimit,

    /// Other moderation mutations per moderator: room for a spam wave.
    #[arg(long, env = "VOTEGRAPH_RATE_MODERATION", default_value = "600/3600")]
    pub rate_moderation: RateLimit,

    /// Flags (from distinct users) that hide an article.
    #[arg(long, env = "VOTEGRAPH_FLAG_THRESHOLD", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub flag_threshold: u32,

    /// Entries the moderation log keeps: the newest this many.
    #[arg(long, env = "VOTEGRAPH_MODLOG_MAX_ENTRIES", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub modlog_max_entries: u64,

    #[command(subcommand)]
    pub command: Option<Command>,

    /// Seconds during which a user posting a link they already posted gets
    /// their first article back (no second article, no second upvote), as
    /// Hacker News does for reposts; so a retried post never doubles. 0
    /// turns it off.
    #[arg(long, env = "VOTEGRAPH_POST_DEDUPE_SECS", default_value_t = 86_400)]
    pub post_dedupe_secs: u64,

    /// Seconds during which further views of an article by the same viewer
    /// (user, or client address when anonymous) are not counted. The window
    /// starts at the article's first view after the previous window ended.
    #[arg(long, env = "VOTEGRAPH_VIEW_WINDOW_SECS", default_value_t = 3600)]
    pub view_window_secs: u64,

    /// Argon2 memory cost in KiB (OWASP's recommended minimum by default).
    #[arg(long, env = "VOTEGRAPH_ARGON2_MEMORY_KIB", default_value_t = 19_456)]
    pub argon2_memory_kib: u32,

    /// Argon2 iterations.
    #[arg(long, env = "VOTEGRAPH_ARGON2_ITERATIONS", default_value_t = 2)]
    pub argon2_iterations: u32,

    // --- Document limits (see `graphql/limits.rs`) ---
    /// Most objects a query may return: each object counts 1, each list its
    /// pageSize or limit, times its parent's count. A page of 100 articles
    /// with every field costs 200, topPosters(limit:100) with each user's
    /// first page 5,200; GraphiQL's introspection query stays well below.
    #[arg(long, env = "VOTEGRAPH_MAX_QUERY_COST", default_value_t = 10_000)]
    pub max_query_cost: u64,

    /// Longest GraphQL document, in bytes.
    #[arg(long, env = "VOTEGRAPH_MAX_QUERY_BYTES", default_value_t = 32 * 1024)]
    pub max_query_bytes: usize,

    /// Most tokens in a document (GraphiQL's introspection query has 150).
    #[arg(long, env = "VOTEGRAPH_MAX_QUERY_TOKENS", default_value_t = 5_000)]
    pub max_query_tokens: usize,

    /// Most aliases in a document.
    #[arg(long, env = "VOTEGRAPH_MAX_ALIASES", default_value_t = 50)]
    pub max_aliases: usize,

    /// Most root fields in an operation (fragments expanded).
    #[arg(long, env = "VOTEGRAPH_MAX_ROOT_FIELDS", default_value_t = 50)]
    pub max_root_fields: usize,

    /// Most fragment definitions in a document.
    #[arg(long, env = "VOTEGRAPH_MAX_FRAGMENTS", default_value_t = 50)]
    pub max_fragments: usize,

    /// Most fragment spreads in a document, as written.
    #[arg(long, env = "VOTEGRAPH_MAX_FRAGMENT_SPREADS", default_value_t = 500)]
    pub max_fragment_spreads: usize,

    /// Most operations in a document.
    #[arg(long, env = "VOTEGRAPH_MAX_OPERATIONS", default_value_t = 10)]
    pub max_operations: usize,

    /// Work all queries and mutations in flight may hold together, in
    /// query-cost units (objects their responses can hold); see
    /// docs/security.md, "Work in flight has one budget". The default runs two queries of the maximum cost at once
    /// (~20 MB each while built), one per core of a small machine, and
    /// keeps a tenth of the budget for small requests.
    #[arg(long, env = "VOTEGRAPH_WORK_BUDGET", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub work_budget: u64,

    /// How long (milliseconds) a request waits for room in the work budget
    /// before it is refused with SERVICE_UNAVAILABLE (503, Retry-After).
    #[arg(long, env = "VOTEGRAPH_WORK_WAIT_MS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub work_wait_ms: u64,

    /// Execution deadline of one query or mutation, in milliseconds; past it
    /// the request answers TIMEOUT and its work is dropped.
    #[arg(long, env = "VOTEGRAPH_REQUEST_TIMEOUT_MS", default_value_t = 5_000)]
    pub request_timeout_ms: u64,

    // --- HTTP limits (see `server.rs` and `http/body.rs`) ---
    /// Largest request body, in bytes.
    #[arg(long, env = "VOTEGRAPH_MAX_BODY_BYTES", default_value_t = 128 * 1024)]
    pub max_body_bytes: usize,

    /// Time a client has to send a request body, in milliseconds.
    #[arg(long, env = "VOTEGRAPH_BODY_TIMEOUT_MS", default_value_t = 10_000)]
    pub body_timeout_ms: u64,

    /// Time a client has to send a request's headers, in milliseconds; an
    /// idle keep-alive connection is closed after the same time.
    #[arg(long, env = "VOTEGRAPH_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,

    /// Most open connections (WebSockets included); past it new connections
    /// get a 503 and are closed.
    #[arg(long, env = "VOTEGRAPH_MAX_CONNECTIONS", default_value_t = 2_048)]
    pub max_connections: usize,

    /// Most open connections from one client address (trusted proxies are
    /// not counted); past it new connections get a 429 and are closed.
    #[arg(
        long,
        env = "VOTEGRAPH_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 256
    )]
    pub max_connections_per_client: usize,

    /// Bytes the anonymous response cache may hold.
    #[arg(long, env = "VOTEGRAPH_RESPONSE_CACHE_BYTES", default_value_t = crate::cache::DEFAULT_MAX_BYTES)]
    pub response_cache_bytes: usize,

    // --- Redis faults ---
    /// How long one Redis command may wait for its reply, in milliseconds;
    /// past it the request fails with INTERNAL "storage unavailable", or
    /// OUTCOME_UNKNOWN for a write that was sent.
    #[arg(long, env = "VOTEGRAPH_REDIS_TIMEOUT_MS", default_value_t = 1_000)]
    pub redis_timeout_ms: u64,

    // --- Automatic persisted queries (see `persisted.rs`) ---
    /// Most persisted documents kept in Redis; registering one more drops
    /// the oldest. With `--max-query-bytes` this bounds their memory
    /// (5,000 × 32 KiB at worst; real documents are a few hundred bytes).
    #[arg(long, env = "VOTEGRAPH_PERSISTED_QUERIES_MAX", default_value_t = 5_000)]
    pub persisted_queries_max: u64,

    /// New persisted documents one client address may register
    /// (COUNT/SECONDS). An app has a few dozen distinct operations and each
    /// is registered once per server, by the first client that sends it;
    /// re-registering a known document is not counted.
    #[arg(
        long,
        env = "VOTEGRAPH_RATE_PERSISTED_QUERY",
        default_value = "100/3600"
    )]
    pub rate_persisted_query: RateLimit,

    /// New persisted documents all clients together may register
    /// (COUNT/SECONDS): many addresses cannot churn the store either.
    #[arg(
        long,
        env = "VOTEGRAPH_RATE_PERSISTED_QUERY_SITE",
        default_value = "1000/3600"
    )]
    pub rate_persisted_query_site: RateLimit,

    /// Share of Redis' `maxmemory` (percent) past which new persisted
    /// documents are refused (SERVICE_UNAVAILABLE), so they never take the
    /// room users' writes need. Without a `maxmemory`, only the count cap
    /// applies.
    #[arg(long, env = "VOTEGRAPH_PERSISTED_QUERY_MAX_MEMORY_PERCENT", default_value_t = 80,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub persisted_query_max_memory_percent: u8,

    /// Seconds a persisted document is kept after its last registration.
    #[arg(
        long,
        env = "VOTEGRAPH_PERSISTED_QUERY_TTL_SECS",
        default_value_t = 86_400
    )]
    pub persisted_query_ttl_secs: u64,
}

/// What `votegraph` can run instead of the server (see `admin.rs`).
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Sets a user's role, e.g. `votegraph set-role alice admin`.
    SetRole {
        /// The user's name (any letter case).
        name: String,
        /// member, moderator or admin.
        #[arg(value_parser = parse_role)]
        role: Role,
    },
}

fn parse_role(raw: &str) -> Result<Role, String> {
    Role::parse(raw).ok_or_else(|| format!("unknown role {raw:?}: member, moderator or admin"))
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

    /// The per-address and per-user write limits, as the schema uses them.
    pub fn rate_limits(&self) -> RateLimits {
        RateLimits {
            sign_up: self.rate_sign_up,
            log_in: self.rate_log_in,
            view: self.rate_view,
            post: crate::rate::PostLimits {
                rate: self.rate_post,
                dedupe_secs: self.post_dedupe_secs,
            },
            vote: self.rate_vote,
            set_groups: self.rate_set_groups,
            rename_slug: self.rate_rename_slug,
            flag: self.rate_flag,
            moderate: self.rate_moderation,
            view_window_secs: self.view_window_secs.max(1),
        }
    }

    /// The Redis the settings name: Sentinel or a URL; None for neither.
    pub fn configured_redis(&self, redis_timeout: Duration) -> anyhow::Result<Option<Locator>> {
        match (
            &self.redis_sentinels,
            &self.redis_master_name,
            &self.redis_url,
        ) {
            (Some(sentinels), Some(master), _) => Ok(Some(
                Locator::sentinel(sentinels, master, redis_timeout)
                    .context("invalid REDIS_SENTINELS")?,
            )),
            (Some(_), None, _) | (None, Some(_), _) => anyhow::bail!(
                "REDIS_SENTINELS and REDIS_MASTER_NAME (--redis-sentinels, --redis-master-name) go together: set both or neither"
            ),
            (None, None, Some(url)) => Ok(Some(Locator::url(url).context("invalid Redis URL")?)),
            (None, None, None) => Ok(None),
        }
    }

    /// What moderation writes keep to (see `store::moderation`).
    pub fn moderation(&self) -> crate::store::ModerationLimits {
        crate::store::ModerationLimits {
            flag_threshold: self.flag_threshold,
            modlog_max_entries: self.modlog_max_entries,
        }
    }

    /// The WebSocket limits, each at least 1 (0 would refuse everything),
    /// but the shared streams' (0 only turns sharing off).
    pub fn ws_limits(&self) -> crate::ws::Limits {
        crate::ws::Limits {
            keep_alive: Duration::from_secs(self.ws_keepalive_secs.max(1)),
            init_timeout: Duration::from_secs(self.ws_init_timeout_secs.max(1)),
            send_timeout: Duration::from_secs(self.ws_send_timeout_secs.max(1)),
            max_message_bytes: self.ws_max_message_bytes.max(1),
            max_subscriptions: self.ws_max_subscriptions.max(1),
            max_connections_per_client: self.ws_max_connections_per_client.max(1),
            max_shared_streams: self.ws_max_shared_streams,
        }
    }

    pub fn pool_timeout(&self) -> Duration {
        Duration::from_millis(self.pool_timeout_ms)
    }

    pub fn persisted_limits(&self) -> crate::persisted::PersistedLimits {
        crate::persisted::PersistedLimits {
            ttl_secs: self.persisted_query_ttl_secs.max(1),
            max_documents: self.persisted_queries_max.max(1),
            per_address: self.rate_persisted_query,
            per_site: self.rate_persisted_query_site,
            max_memory_percent: self.persisted_query_max_memory_percent,
        }
    }

    pub fn budget(&self) -> crate::budget::BudgetSettings {
        crate::budget::BudgetSettings {
            capacity: self.work_budget,
            wait: Duration::from_millis(self.work_wait_ms),
        }
    }

    pub fn document_limits(&self) -> crate::graphql::limits::DocumentLimits {
        crate::graphql::limits::DocumentLimits {
            max_bytes: self.max_query_bytes,
            max_tokens: self.max_query_tokens,
            max_cost: self.max_query_cost,
            max_aliases: self.max_aliases,
            max_root_fields: self.max_root_fields,
            max_fragments: self.max_fragments,
            max_spreads: self.max_fragment_spreads,
            max_operations: self.max_operations,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_parse_count_per_seconds() {
        let limit: RateLimit = " 10 / 3600 ".parse().unwrap();
        assert_eq!((limit.count(), limit.window_secs()), (10, 3600));
        assert_eq!(limit.to_string(), "10/3600");
        for bad in [
            "10",
            "10/",
            "/60",
            "ten/60",
            "-1/60",
            "10/60/2",
            "0/60",
            "5/0",
            "10/99999999999",
        ] {
            let err = bad.parse::<RateLimit>().unwrap_err();
            assert!(
                err.contains("10/3600") || err.contains("at least 1"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn defaults_parse_and_malformed_flags_stop_the_start() {
        let s = Settings::parse_from(["votegraph"]);
        assert_eq!(s.rate_sign_up.to_string(), "5/3600");
        assert_eq!(s.rate_log_in.to_string(), "30/900");
        assert_eq!(s.rate_view.to_string(), "120/60");
        assert_eq!(s.rate_post.to_string(), "10/3600");
        assert_eq!(s.rate_vote.to_string(), "120/60");
        assert_eq!(s.rate_set_groups.to_string(), "30/60");
        assert_eq!(s.rate_rename_slug.to_string(), "10/3600");
        assert_eq!(s.view_window_secs, 3600);
        assert!(s.trusted_proxies.is_empty());
        assert!(!s.reconcile_votes);
        assert!(Settings::parse_from(["votegraph", "--reconcile-votes"]).reconcile_votes);

        let err = Settings::try_parse_from(["votegraph", "--rate-vote", "lots"]).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("--rate-vote") && message.contains("COUNT/SECONDS"),
            "{message}"
        );
        let err = Settings::try_parse_from(["votegraph", "--trusted-proxies", "10.0.0.0/8,proxy"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--trusted-proxies") && err.contains("proxy"),
            "{err}"
        );
    }
}
