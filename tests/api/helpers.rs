//! Starts real `redis-server`s and real votegraph servers for the tests.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::sync::oneshot;
use votegraph::config::Settings;
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
    pub redis: TestRedis,
    pub client: reqwest::Client,
    _instance: Instance,
}

impl TestApp {
    /// How many subscriptions the server reports on `/health`.
    pub async fn subscriptions(&self) -> u64 {
        let body: Value = self
            .client
            .get(format!("{}/health", self.address))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        body["subscriptions"]
            .as_u64()
            .expect("subscriptions in /health")
    }
}

/// Settings for a test server on `redis`: port 0, cheap password hashing
/// (the same code path with a smaller cost, so hundreds of sign-ups are fast).
pub fn test_settings(redis: &TestRedis) -> Settings {
    let mut settings = Settings::for_redis(&redis.url());
    settings.argon2_memory_kib = 1024;
    settings.argon2_iterations = 1;
    settings.pool_timeout_ms = 500;
    settings
}

pub async fn spawn_app() -> TestApp {
    let redis = TestRedis::start().await;
    spawn_app_with(redis, test_settings).await
}

/// Another server instance on `settings`' Redis; it stops when dropped.
pub struct Instance {
    pub address: String,
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
    let server = tokio::spawn(async move {
        app.run_until(std::future::pending()).await.expect("server");
    });
    Instance { address, server }
}

/// A server that stops when `stop` fires (or its sender is dropped), as
/// on Ctrl-C or SIGTERM, so tests can watch a graceful shutdown.
pub async fn spawn_server_until(settings: Settings, stop: oneshot::Receiver<()>) -> Instance {
    let app = Application::build(settings).await.expect("build app");
    let address = format!("http://127.0.0.1:{}", app.port());
    let server = tokio::spawn(async move {
        let signal = async {
            let _ = stop.await;
        };
        app.run_until(signal).await.expect("server");
    });
    Instance { address, server }
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
        redis,
        client: reqwest::Client::new(),
        _instance: instance,
    }
}

impl TestApp {
    /// POSTs a GraphQL request and returns the JSON body.
    pub async fn gql(&self, query: &str, variables: Value, token: Option<&str>) -> Value {
        let mut request = self
            .client
            .post(format!("{}/graphql", self.address))
            .json(&json!({ "query": query, "variables": variables }));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("request");
        assert!(response.status().is_success(), "HTTP {}", response.status());
        response.json().await.expect("json body")
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

pub const ARTICLE_FIELDS: &str = "id title link poster { name } postedAt votes score groups";

/// The `id`s of a JSON list of articles.
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
