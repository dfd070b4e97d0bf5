//! Runtime configuration, from flags or the environment; every default
//! gives a working server on a developer's machine.

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

    /// Log lines as `text`, or `json` (one object per line) for log shippers.
    #[arg(long, env = "VOTEGRAPH_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: crate::telemetry::LogFormat,

    /// A second listener serving only `GET /metrics`, to anyone who reaches it.
    #[arg(long, env = "VOTEGRAPH_METRICS_BIND")]
    pub metrics_bind: Option<String>,

    /// With `--trusted-proxies`, still serve `/metrics` on `--bind` to direct
    /// loopback clients (a local proxy could forward without saying so).
    #[arg(long, env = "VOTEGRAPH_METRICS_ON_API_PORT")]
    pub metrics_on_api_port: bool,

    /// Redis to use, e.g. `redis://127.0.0.1:6379/0`; unset: a local
    /// `redis-server` in `--data-dir`.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<String>,

    /// Redis Sentinel: the sentinels' `host:port`, comma-separated; with
    /// `--redis-master-name`, used instead of REDIS_URL.
    #[arg(long, env = "REDIS_SENTINELS")]
    pub redis_sentinels: Option<String>,

    /// Redis Cluster: seed nodes' `host:port`, comma-separated; used instead
    /// of REDIS_URL, and with neither Sentinel nor a read replica.
    #[arg(long, env = "REDIS_CLUSTER_NODES")]
    pub redis_cluster_nodes: Option<String>,

    /// Redis Cluster: the shards a new cluster keyspace is made with
    /// (default 12), kept in the keyspace. A keyspace that has a count
    /// keeps it: a different one is refused.
    #[arg(long, env = "VOTEGRAPH_CLUSTER_SHARDS",
          value_parser = clap::value_parser!(u16).range(1..=i64::from(crate::store::keys::MAX_SHARDS)))]
    pub cluster_shards: Option<u16>,

    /// A read replica for anonymous queries' rankings and articles.
    #[arg(long, env = "REDIS_REPLICA_URL")]
    pub redis_replica_url: Option<String>,

    /// The master name the sentinels monitor (with `--redis-sentinels`).
    #[arg(long, env = "REDIS_MASTER_NAME")]
    pub redis_master_name: Option<String>,

    /// Writes answer once this many replicas have them (`WAIT`).
    #[arg(long, env = "VOTEGRAPH_WAIT_REPLICAS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=16))]
    pub wait_replicas: u32,

    /// On a Redis Cluster, the entries a shard's outbox may hold before
    /// writes on that shard are refused (`SERVICE_UNAVAILABLE`) until it
    /// drains: the changes for other shards that could not be applied.
    #[arg(long, env = "VOTEGRAPH_OUTBOX_MAX_ENTRIES", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub outbox_max_entries: u64,

    /// How long (ms) a write waits for `--wait-replicas` before `NOT_REPLICATED`.
    #[arg(long, env = "VOTEGRAPH_WAIT_TIMEOUT_MS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub wait_timeout_ms: u64,

    /// Where the self-managed `redis-server` keeps its data (only without
    /// REDIS_URL); `set-role` finds the running server's Redis there.
    #[arg(
        long,
        env = "VOTEGRAPH_DATA_DIR",
        default_value = "data",
        global = true
    )]
    pub data_dir: PathBuf,

    /// The `redis-server` program to start when REDIS_URL is unset.
    #[arg(long, env = "VOTEGRAPH_REDIS_SERVER", default_value = "redis-server")]
    pub redis_server: String,

    /// Most Redis connections in the pool (each one is multiplexed).
    #[arg(long, env = "VOTEGRAPH_POOL_SIZE", default_value_t = 8)]
    pub pool_size: u32,

    /// How long (ms) a request waits for a pooled connection.
    #[arg(long, env = "VOTEGRAPH_POOL_TIMEOUT_MS", default_value_t = 1000)]
    pub pool_timeout_ms: u64,

    /// Browser origins allowed to call the API, comma-separated (`*`: any).
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

    /// Seconds a new WebSocket has to send `connection_init` (else 4408).
    #[arg(long, env = "VOTEGRAPH_WS_INIT_TIMEOUT_SECS", default_value_t = 10)]
    pub ws_init_timeout_secs: u64,

    /// Largest incoming WebSocket message or frame, in bytes (else 1009).
    #[arg(long, env = "VOTEGRAPH_WS_MAX_MESSAGE_BYTES", default_value_t = 65_536)]
    pub ws_max_message_bytes: usize,

    /// Operations one WebSocket may run at once.
    #[arg(long, env = "VOTEGRAPH_WS_MAX_SUBSCRIPTIONS", default_value_t = 20)]
    pub ws_max_subscriptions: usize,

    /// WebSockets one client address may hold (else HTTP 429).
    #[arg(
        long,
        env = "VOTEGRAPH_WS_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 16
    )]
    pub ws_max_connections_per_client: usize,

    /// Seconds a WebSocket write may take before the client is dropped.
    #[arg(long, env = "VOTEGRAPH_WS_SEND_TIMEOUT_SECS", default_value_t = 10)]
    pub ws_send_timeout_secs: u64,

    /// Distinct subscription streams run once and shared (0: none shared).
    #[arg(long, env = "VOTEGRAPH_WS_MAX_SHARED_STREAMS", default_value_t = 1_000)]
    pub ws_max_shared_streams: usize,

    /// Membership checks a cold group page may spend before the group's
    /// ranking is built with ZINTERSTORE (0: always build it).
    #[arg(long, env = "VOTEGRAPH_GROUP_SCAN_BUDGET", default_value_t = 5_000)]
    pub group_scan_budget: u32,

    /// Accepted and ignored: the full pass of every start derives the vote
    /// indexes.
    #[arg(long, env = "VOTEGRAPH_RECONCILE_VOTES")]
    pub reconcile_votes: bool,

    /// On SIGTERM or Ctrl-C, serve this long (ms) while `/health` says
    /// `draining`, so a load balancer takes the instance out first.
    #[arg(long, env = "VOTEGRAPH_SHUTDOWN_GRACE_MS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub shutdown_grace_ms: u64,

    /// How often (ms) the `TOP_*` rankings are pruned and re-derived.
    #[arg(long, env = "VOTEGRAPH_TOP_UPKEEP_MS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub top_upkeep_ms: u64,

    /// Do not cache anonymous query responses (for measurements).
    #[arg(long, env = "VOTEGRAPH_NO_RESPONSE_CACHE")]
    pub no_response_cache: bool,

    /// logIn attempts one user name gets per window.
    #[arg(long, env = "VOTEGRAPH_LOGIN_ATTEMPTS", default_value_t = 10)]
    pub login_attempts: u32,

    /// Length of the logIn attempt window, in seconds.
    #[arg(long, env = "VOTEGRAPH_LOGIN_WINDOW_SECS", default_value_t = 900)]
    pub login_window_secs: u64,

    /// Proxies (IPs or CIDR networks) whose `X-Forwarded-For` / `Forwarded`
    /// name the client.
    #[arg(long, env = "VOTEGRAPH_TRUSTED_PROXIES", default_value = "")]
    pub trusted_proxies: TrustedProxies,

    /// signUps per client address (COUNT/SECONDS).
    #[arg(long, env = "VOTEGRAPH_RATE_SIGN_UP", default_value = "5/3600")]
    pub rate_sign_up: RateLimit,

    /// logIn attempts per client address, on top of `--login-attempts`.
    #[arg(long, env = "VOTEGRAPH_RATE_LOG_IN", default_value = "30/900")]
    pub rate_log_in: RateLimit,

    /// Counted `viewArticle`s per user, or per client address when anonymous.
    #[arg(long, env = "VOTEGRAPH_RATE_VIEW", default_value = "120/60")]
    pub rate_view: RateLimit,

    /// Posts per user.
    #[arg(long, env = "VOTEGRAPH_RATE_POST", default_value = "10/3600")]
    pub rate_post: RateLimit,

    /// Votes per user.
    #[arg(long, env = "VOTEGRAPH_RATE_VOTE", default_value = "120/60")]
    pub rate_vote: RateLimit,

    /// setGroups calls per user.
    #[arg(long, env = "VOTEGRAPH_RATE_SET_GROUPS", default_value = "30/60")]
    pub rate_set_groups: RateLimit,

    /// renameSlug calls per user.
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

    /// Seconds an account must have existed before its flags count toward
    /// hiding an article (younger accounts' flags reach the queue only).
    #[arg(
        long,
        env = "VOTEGRAPH_FLAG_MIN_ACCOUNT_AGE_SECS",
        default_value_t = 86_400
    )]
    pub flag_min_account_age_secs: u64,

    /// Karma an account must have before its flags count toward hiding an
    /// article (others' flags reach the queue only).
    #[arg(
        long,
        env = "VOTEGRAPH_FLAG_MIN_KARMA",
        default_value_t = 10,
        allow_negative_numbers = true
    )]
    pub flag_min_karma: i64,

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

    /// Seconds during which a viewer's further views of an article are not counted.
    #[arg(long, env = "VOTEGRAPH_VIEW_WINDOW_SECS", default_value_t = 3600)]
    pub view_window_secs: u64,

    /// Argon2 memory cost in KiB (OWASP's recommended minimum by default).
    #[arg(long, env = "VOTEGRAPH_ARGON2_MEMORY_KIB", default_value_t = 19_456)]
    pub argon2_memory_kib: u32,

    /// Argon2 iterations.
    #[arg(long, env = "VOTEGRAPH_ARGON2_ITERATIONS", default_value_t = 2)]
    pub argon2_iterations: u32,

    #[command(flatten)]
    pub documents: crate::graphql::limits::DocumentLimits,

    #[command(flatten)]
    pub budget: crate::budget::BudgetSettings,

    /// Execution deadline of one query or mutation, in milliseconds.
    #[arg(long, env = "VOTEGRAPH_REQUEST_TIMEOUT_MS", default_value_t = 5_000)]
    pub request_timeout_ms: u64,

    /// Largest request body, in bytes.
    #[arg(long, env = "VOTEGRAPH_MAX_BODY_BYTES", default_value_t = 128 * 1024)]
    pub max_body_bytes: usize,

    /// Time (ms) a client has to send a request body.
    #[arg(long, env = "VOTEGRAPH_BODY_TIMEOUT_MS", default_value_t = 10_000)]
    pub body_timeout_ms: u64,

    /// Time (ms) a client has to send a request's headers; idle keep-alive
    /// connections close after it too.
    #[arg(long, env = "VOTEGRAPH_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,

    /// Most open connections, WebSockets included (503 past it).
    #[arg(long, env = "VOTEGRAPH_MAX_CONNECTIONS", default_value_t = 2_048)]
    pub max_connections: usize,

    /// Most open connections from one client address (429 past it).
    #[arg(
        long,
        env = "VOTEGRAPH_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 256
    )]
    pub max_connections_per_client: usize,

    /// Bytes the anonymous response cache may hold.
    #[arg(long, env = "VOTEGRAPH_RESPONSE_CACHE_BYTES", default_value_t = crate::cache::DEFAULT_MAX_BYTES)]
    pub response_cache_bytes: usize,

    /// Longest wait (ms) for one Redis reply.
    #[arg(long, env = "VOTEGRAPH_REDIS_TIMEOUT_MS", default_value_t = 1_000)]
    pub redis_timeout_ms: u64,

    /// Most persisted documents kept in Redis (the oldest are dropped).
    #[arg(long, env = "VOTEGRAPH_PERSISTED_QUERIES_MAX", default_value_t = 5_000)]
    pub persisted_queries_max: u64,

    /// New persisted documents per client address (COUNT/SECONDS).
    #[arg(
        long,
        env = "VOTEGRAPH_RATE_PERSISTED_QUERY",
        default_value = "100/3600"
    )]
    pub rate_persisted_query: RateLimit,

    /// New persisted documents from all clients together (COUNT/SECONDS).
    #[arg(
        long,
        env = "VOTEGRAPH_RATE_PERSISTED_QUERY_SITE",
        default_value = "1000/3600"
    )]
    pub rate_persisted_query_site: RateLimit,

    /// Share of Redis' `maxmemory` (percent) past which new persisted
    /// documents are refused.
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

    // --- Trusted documents (see `trusted.rs`) ---
    /// A manifest of the site's own clients' documents, read at start: id
    /// → document (GraphQL Codegen, Relay), or Apollo's manifest.
    #[arg(long, env = "VOTEGRAPH_TRUSTED_DOCUMENTS")]
    pub trusted_documents: Option<PathBuf>,

    /// Run only the documents of `--trusted-documents`; refuse any other
    /// (PERSISTED_QUERY_NOT_IN_LIST), and register no persisted query.
    #[arg(
        long,
        env = "VOTEGRAPH_TRUSTED_DOCUMENTS_ONLY",
        requires = "trusted_documents"
    )]
    pub trusted_documents_only: bool,
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

    /// The Redis the settings name: a cluster, Sentinel or a URL; None for
    /// none of them.
    pub fn configured_redis(&self, redis_timeout: Duration) -> anyhow::Result<Option<Locator>> {
        if let Some(nodes) = &self.redis_cluster_nodes {
            let others = [
                ("REDIS_URL", self.redis_url.is_some()),
                ("REDIS_SENTINELS", self.redis_sentinels.is_some()),
                ("REDIS_MASTER_NAME", self.redis_master_name.is_some()),
                ("REDIS_REPLICA_URL", self.redis_replica_url.is_some()),
            ];
            let set: Vec<&str> = others.iter().filter(|o| o.1).map(|o| o.0).collect();
            anyhow::ensure!(
                set.is_empty(),
                "REDIS_CLUSTER_NODES (--redis-cluster-nodes) cannot be combined with {}: a cluster finds its own primaries and replicas",
                set.join(", ")
            );
            return Locator::cluster(nodes, redis_timeout, self.reply_timeout(redis_timeout))
                .context("invalid REDIS_CLUSTER_NODES")
                .map(Some);
        }
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
            flag_min_account_age_secs: self.flag_min_account_age_secs,
            flag_min_karma: self.flag_min_karma,
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

    /// The longest wait for one reply: `redis_timeout`, plus the
    /// `--wait-timeout-ms` a write's `WAIT` may take, so a primary left
    /// without replicas answers `NOT_REPLICATED` rather than time out.
    pub fn reply_timeout(&self, redis_timeout: Duration) -> Duration {
        match self.wait_replicas {
            0 => redis_timeout,
            _ => redis_timeout + Duration::from_millis(self.wait_timeout_ms),
        }
    }

    pub fn persisted_limits(&self) -> crate::store::RegisterLimits {
        crate::store::RegisterLimits {
            ttl_secs: self.persisted_query_ttl_secs.max(1),
            max_documents: self.persisted_queries_max.max(1),
            per_address: self.rate_persisted_query,
            per_site: self.rate_persisted_query_site,
            max_memory_percent: self.persisted_query_max_memory_percent,
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
        assert_eq!(s.flag_min_account_age_secs, 86_400);
        assert_eq!(s.flag_min_karma, 10);
        let lenient = ["votegraph", "--flag-min-karma", "-5"];
        assert_eq!(Settings::parse_from(lenient).flag_min_karma, -5);
        assert!(s.trusted_proxies.is_empty());
        assert!(Settings::try_parse_from(["votegraph", "--reconcile-votes"]).is_ok());

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

    #[test]
    fn a_cluster_is_not_combined_with_other_redis_settings() {
        let timeout = Duration::from_secs(1);
        let cluster = [
            "votegraph",
            "--redis-cluster-nodes",
            "127.0.0.1:7000,127.0.0.1:7001",
        ];
        let s = Settings::parse_from(cluster);
        assert!(s.configured_redis(timeout).unwrap().unwrap().is_cluster());
        for other in [
            ["--redis-url", "redis://127.0.0.1:6379"],
            ["--redis-sentinels", "127.0.0.1:26379"],
            ["--redis-master-name", "mymaster"],
            ["--redis-replica-url", "redis://127.0.0.1:6380"],
        ] {
            let s = Settings::parse_from(cluster.iter().chain(other.iter()));
            let err = s.configured_redis(timeout).err().expect("refused");
            let message = format!("{err:#}");
            assert!(message.contains("REDIS_CLUSTER_NODES"), "{message}");
            assert!(message.contains("cannot be combined"), "{message}");
        }
        let none = Settings::parse_from(["votegraph", "--redis-cluster-nodes", " , "]);
        let err = none.configured_redis(timeout).err().expect("refused");
        assert!(format!("{err:#}").contains("names no node"), "{err:#}");
    }
}
