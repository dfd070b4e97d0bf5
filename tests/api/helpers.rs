//! Starts real `redis-server`s and real votegraph servers for the tests.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::sync::oneshot;
use votegraph::config::{RateLimit, Settings};
use votegraph::startup::Application;

/// A private `redis-server` on a unix socket in a temporary directory.
pub struct TestRedis {
    child: Option<Child>,
    dir: TempDir,
}

impl TestRedis {
    pub async fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("vg")
            .tempdir()
            .expect("temp dir");
        let mut redis = Self { child: None, dir };
        redis.launch().await;
        redis
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    async fn launch(&mut self) {
        let child = Command::new(
            std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()),
        )
        .args([
            "--port",
            "0",
            "--save",
            "",
            "--appendonly",
            "no",
            "--unixsocket",
        ])
        .arg(self.socket())
        .arg("--dir")
        .arg(self.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed to run the tests (apt-get install redis-server)");
        self.child = Some(child);
        for _ in 0..200 {
            if let Ok(mut c) = self.try_conn().await {
                let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
                if pong.is_ok() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("redis-server did not start");
    }

    async fn try_conn(&self) -> redis::RedisResult<MultiplexedConnection> {
        redis::Client::open(self.url())?
            .get_multiplexed_async_connection()
            .await
    }

    /// A direct connection, for arranging and inspecting data.
    pub async fn conn(&self) -> MultiplexedConnection {
        self.try_conn().await.expect("connect to test redis")
    }

    /// Kills the server (as a crash would).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// Starts it again on the same socket (empty, as no data is persisted).
    pub async fn restart(&mut self) {
        self.stop();
        self.launch().await;
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

pub struct TestApp {
    pub address: String,
    /// The port of the `--metrics-bind` listener, when the settings ask for one.
    pub metrics_port: Option<u16>,
    pub redis: TestRedis,
    pub client: reqwest::Client,
    _instance: Instance,
}

impl TestApp {
    /// The JSON of `/health`.
    pub async fn health(&self) -> Value {
        health_at(&self.client, &self.address).await
    }

    /// Whether the server answers `{ articleCount }` with 0 within `tries`
    /// tenths of a second: after a Redis outage, a Redis that came back
    /// empty (the test servers keep no data) is served again.
    pub async fn serves_again(&self, tries: usize) -> bool {
        for _ in 0..tries {
            let body = self.gql("{ articleCount }", json!({}), None).await;
            if body["data"]["articleCount"] == 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// How many subscriptions the server reports on `/health`.
    pub async fn subscriptions(&self) -> u64 {
        self.health().await["subscriptions"]
            .as_u64()
            .expect("subscriptions in /health")
    }
}

/// The JSON of `/health` of the server at `address`.
pub async fn health_at(client: &reqwest::Client, address: &str) -> Value {
    client
        .get(format!("{address}/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Settings for a test server on `redis`: port 0, cheap password hashing
/// (the same code path with a smaller cost, so hundreds of sign-ups are fast).
///
/// Every test client is 127.0.0.1 and many tests sign up dozens of users or
/// post dozens of articles as one, so the write limits are raised far out
/// of the way (the limits still run, counting in Redis); `rate_limits.rs`
/// sets small ones explicitly.
pub fn test_settings(redis: &TestRedis) -> Settings {
    test_settings_for(&redis.url())
}

/// [`test_settings`] for a Redis the test runs itself (a URL).
pub fn test_settings_for(redis_url: &str) -> Settings {
    let mut settings = Settings::for_redis(redis_url);
    settings.argon2_memory_kib = 1024;
    settings.argon2_iterations = 1;
    settings.pool_timeout_ms = 500;
    let generous: RateLimit = "1000000/60".parse().expect("a rate limit");
    settings.rate_sign_up = generous;
    settings.rate_log_in = generous;
    settings.rate_view = generous;
    settings.rate_post = generous;
    settings.rate_vote = generous;
    settings.rate_set_groups = generous;
    settings.rate_rename_slug = generous;
    settings.rate_persisted_query = generous;
    settings.rate_persisted_query_site = generous;
    // The TOP_* upkeep runs once at startup and then stays out of the way
    // of tests that count Redis commands; `feed.rs` sets its own pace.
    settings.top_upkeep_ms = 60_000;
    settings
}

pub async fn spawn_app() -> TestApp {
    let redis = TestRedis::start().await;
    let app = spawn_app_with(redis, test_settings).await;
    // A first start indexes the book's votes in the background; waiting
    // for it keeps that Redis work out of tests that count commands.
    let mut conn = app.redis.conn().await;
    wait_for_vote_index(&mut conn, None).await;
    wait_for_top_index(&mut conn).await;
    app
}

/// Waits until the first round of the TOP_* rankings' upkeep is done: the
/// build from `score:` and `time:`, then the pruning, whose last period
/// leaves its mark.
pub async fn wait_for_top_index(conn: &mut MultiplexedConnection) {
    for _ in 0..500 {
        let done: bool = redis::cmd("HEXISTS")
            .arg("index:top:pruned")
            .arg("year")
            .query_async(conn)
            .await
            .expect("EXISTS");
        if done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the TOP_* rankings were not built within 5 s");
}

/// Another server instance on `settings`' Redis; it stops when dropped.
pub struct Instance {
    pub address: String,
    pub metrics_port: Option<u16>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.server.abort();
    }
}

pub async fn spawn_server(settings: Settings) -> Instance {
    let app = Application::build(settings).await.expect("build app");
    let address = format!("http://127.0.0.1:{}", app.port());
    let metrics_port = app.metrics_port();
    let server = tokio::spawn(async move {
        app.run_until(std::future::pending()).await.expect("server");
    });
    Instance {
        address,
        metrics_port,
        server,
    }
}

/// A server that stops when `stop` fires (or its sender is dropped), as
/// on Ctrl-C or SIGTERM, so tests can watch a graceful shutdown.
pub async fn spawn_server_until(settings: Settings, stop: oneshot::Receiver<()>) -> Instance {
    let app = Application::build(settings).await.expect("build app");
    let address = format!("http://127.0.0.1:{}", app.port());
    let metrics_port = app.metrics_port();
    let server = tokio::spawn(async move {
        let signal = async {
            let _ = stop.await;
        };
        app.run_until(signal).await.expect("server");
    });
    Instance {
        address,
        metrics_port,
        server,
    }
}

impl Instance {
    /// Whether the server's `run_until` returned within `wait`.
    pub async fn stopped_within(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, &mut self.server).await.is_ok()
    }
}

pub async fn spawn_app_with(
    redis: TestRedis,
    configure: impl FnOnce(&TestRedis) -> Settings,
) -> TestApp {
    let instance = spawn_server(configure(&redis)).await;
    TestApp {
        address: instance.address.clone(),
        metrics_port: instance.metrics_port,
        redis,
        client: reqwest::Client::new(),
        _instance: instance,
    }
}

impl TestApp {
    /// POSTs a GraphQL request and returns the JSON body.
    pub async fn gql(&self, query: &str, variables: Value, token: Option<&str>) -> Value {
        gql_at(&self.client, &self.address, query, variables, token, None).await
    }

    /// Like [`TestApp::gql`], sent with an `X-Forwarded-For` header (which
    /// names the client only when the server trusts 127.0.0.1 as a proxy).
    pub async fn gql_forwarded(
        &self,
        forwarded_for: &str,
        query: &str,
        variables: Value,
        token: Option<&str>,
    ) -> Value {
        gql_at(
            &self.client,
            &self.address,
            query,
            variables,
            token,
            Some(forwarded_for),
        )
        .await
    }

    /// Like [`TestApp::gql`], but fails the test on any GraphQL error.
    pub async fn gql_ok(&self, query: &str, variables: Value, token: Option<&str>) -> Value {
        let body = self.gql(query, variables, token).await;
        assert!(body.get("errors").is_none(), "unexpected errors: {body}");
        body["data"].clone()
    }

    /// Signs a user up (password `password-of-<name>`) and returns the token.
    pub async fn sign_up(&self, name: &str) -> String {
        let data = self
            .gql_ok(
                "mutation($n: String!, $p: String!) { signUp(name: $n, password: $p) { token } }",
                json!({ "n": name, "p": format!("password-of-{name}") }),
                None,
            )
            .await;
        data["signUp"]["token"].as_str().expect("token").to_owned()
    }

    /// Posts an article and returns it with every field.
    pub async fn post(&self, token: &str, title: &str, groups: &[&str]) -> Value {
        let data = self
            .gql_ok(
                &format!("mutation($t: String!, $l: String!, $g: [String!]!) {{ post(title: $t, link: $l, groups: $g) {{ {ARTICLE_FIELDS} }} }}"),
                json!({ "t": title, "l": format!("https://example.com/{}", title.replace(' ', "-")), "g": groups }),
                Some(token),
            )
            .await;
        data["post"].clone()
    }

    /// Upvotes; returns the whole GraphQL body so callers can check errors.
    pub async fn vote(&self, token: &str, id: &str) -> Value {
        self.gql(
            &format!("mutation($id: ID!) {{ vote(articleId: $id) {{ {ARTICLE_FIELDS} }} }}"),
            json!({ "id": id }),
            Some(token),
        )
        .await
    }

    /// Ids of a page of the front page in the given order.
    pub async fn front_page_ids(&self, order: &str, page: i64, page_size: i64) -> Vec<String> {
        let data = self
            .gql_ok(
                "query($o: ArticleOrder!, $p: Int!, $s: Int!) { articles(order: $o, page: $p, pageSize: $s) { id } }",
                json!({ "o": order, "p": page, "s": page_size }),
                None,
            )
            .await;
        ids(&data["articles"])
    }
}

/// POSTs a GraphQL request to the server at `address` (any instance) and
/// returns the JSON body.
pub async fn gql_at(
    client: &reqwest::Client,
    address: &str,
    query: &str,
    variables: Value,
    token: Option<&str>,
    forwarded_for: Option<&str>,
) -> Value {
    let mut request = client
        .post(format!("{address}/graphql"))
        .json(&json!({ "query": query, "variables": variables }));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(forwarded_for) = forwarded_for {
        request = request.header("x-forwarded-for", forwarded_for);
    }
    let response = request.send().await.expect("request");
    assert!(response.status().is_success(), "HTTP {}", response.status());
    response.json().await.expect("json body")
}

pub const ARTICLE_FIELDS: &str = "id title link poster { name } postedAt votes score groups";

/// The `id`s of a JSON list of articles.
/// Signs `name` up at the server at `address` (any instance, or a proxy
/// in front of some) and returns the token.
pub async fn sign_up_at(client: &reqwest::Client, address: &str, name: &str) -> String {
    let body = gql_at(
        client,
        address,
        "mutation($n: String!, $p: String!) { signUp(name: $n, password: $p) { token } }",
        json!({ "n": name, "p": format!("password-of-{name}") }),
        None,
        None,
    )
    .await;
    body["data"]["signUp"]["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token: {body}"))
        .to_owned()
}

/// A server whose TOP_* and directory upkeep ticks every 100 ms, for the
/// tests that watch it catch up with writes made behind its back.
pub async fn spawn_app_tending(redis: TestRedis) -> TestApp {
    spawn_app_with(redis, |r| {
        let mut s = test_settings(r);
        s.top_upkeep_ms = 100;
        s
    })
    .await
}

pub fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("list")
        .iter()
        .map(|a| a["id"].as_str().expect("id").to_owned())
        .collect()
}

/// The `extensions.code` of the first error of a response.
pub fn error_code(body: &Value) -> &str {
    body["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error with a code: {body}"))
}

/// Redis' count of read events: one per request (or pipeline) it receives.
pub async fn reads_processed(conn: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_reads_processed in INFO")
}

/// Calls of each Redis command since the last [`reset_command_stats`],
/// leaving out the test's own `INFO` and `CONFIG`.
pub async fn command_stats(conn: &mut MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let calls = rest.split(',').next()?.parse().ok()?;
            // `config|resetstat` on Redis 7, `config` before.
            let own = name == "info" || name.starts_with("config");
            (!own).then(|| (name.to_owned(), calls))
        })
        .collect()
}

/// Zeroes Redis' command counters (see [`command_stats`]).
pub async fn reset_command_stats(conn: &mut MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .expect("CONFIG RESETSTAT");
}

/// Kills every pub/sub connection (as a network blip would); answers how
/// many there were.
pub async fn kill_pubsub_connections(conn: &mut MultiplexedConnection) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(conn)
        .await
        .expect("CLIENT KILL")
}

/// How many times Redis ran `command` so far.
pub async fn command_calls(conn: &mut MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The `votegraph` binary as a child process, logging to a file; killed
/// when dropped. For what an in-process server cannot show: its own
/// resident memory and its log.
pub struct Binary {
    child: Child,
    pub address: String,
    pub log: PathBuf,
    _dir: TempDir,
}

impl Binary {
    /// Starts the binary on `redis_url` with the test settings' cheap
    /// hashing, plus `env` (`VOTEGRAPH_…` settings), and waits until
    /// `/health` answers 200.
    pub async fn start(redis_url: &str, env: &[(&str, &str)]) -> Self {
        Self::launch(redis_url, env, true).await
    }

    /// Like [`Binary::start`], but waits only for `/health` to answer at
    /// all (503 while Redis is unreachable).
    pub async fn start_answering(redis_url: &str, env: &[(&str, &str)]) -> Self {
        Self::launch(redis_url, env, false).await
    }

    async fn launch(redis_url: &str, env: &[(&str, &str)], healthy: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("vgb")
            .tempdir()
            .expect("temp dir");
        let log = dir.path().join("votegraph.log");
        let port = free_port();
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_votegraph"));
        command
            .env("REDIS_URL", redis_url)
            .env("VOTEGRAPH_BIND", format!("127.0.0.1:{port}"))
            .env("VOTEGRAPH_ARGON2_MEMORY_KIB", "1024")
            .env("VOTEGRAPH_ARGON2_ITERATIONS", "1")
            .env("RUST_LOG", "info")
            .stdout(out)
            .stderr(err);
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command.spawn().expect("start votegraph");
        let binary = Self {
            child,
            address: format!("http://127.0.0.1:{port}"),
            log,
            _dir: dir,
        };
        for _ in 0..200 {
            if let Ok(r) = reqwest::get(format!("{}/health", binary.address)).await {
                if r.status().is_success() || !healthy {
                    return binary;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("votegraph did not start: {}", binary.log_text());
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("/proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// The marker the vote-index backfill sets when its pass is done.
pub const VOTE_INDEX_MARKER: &str = "index:user-votes:built";

/// Waits (at most 10 s) until the vote-index backfill has set its marker
/// to something other than `previous`, and returns it.
pub async fn wait_for_vote_index(
    conn: &mut MultiplexedConnection,
    previous: Option<&str>,
) -> String {
    for _ in 0..200 {
        let marker: Option<String> = redis::cmd("GET")
            .arg(VOTE_INDEX_MARKER)
            .query_async(conn)
            .await
            .expect("GET");
        if let Some(marker) = marker {
            if Some(marker.as_str()) != previous {
                return marker;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the vote index backfill did not finish within 10 s");
}

/// Holds every Redis client's commands for `ms` milliseconds.
pub async fn pause_redis(conn: &mut MultiplexedConnection, ms: u64) {
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query_async(conn)
        .await
        .unwrap();
}
