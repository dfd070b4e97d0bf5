//! In-process votegraph servers for the tests: [`TestApp`] (a server on
//! its own Redis), the settings they run on, and more [`Instance`]s on the
//! same Redis.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::oneshot;
use votegraph::config::{RateLimit, Settings};
use votegraph::startup::Application;

use super::redis::{wait_for_top_index, TestRedis};
use super::time::{done_if, eventually, eventually_every, poll_until};

/// A server on its own [`TestRedis`], with a client to speak to it; the
/// server stops when dropped.
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
    pub async fn serves_again(&self, tries: u32) -> bool {
        let tenth = Duration::from_millis(100);
        poll_until(tenth * tries, tenth, async || {
            let body = self.gql("{ articleCount }", json!({}), None).await;
            body["data"]["articleCount"] == 0
        })
        .await
        .is_ok()
    }

    /// Waits until the deriver (which follows keyspace notifications,
    /// votegraph's own writes included) has nothing left to do, for tests
    /// that count Redis commands: its derivations are Redis commands too.
    pub async fn wait_for_derivations(&self) {
        // A notification reaches the queue within a few milliseconds and
        // waits COALESCE (20 ms) there.
        tokio::time::sleep(Duration::from_millis(60)).await;
        let mut idle = 0;
        poll_until(
            Duration::from_secs(5),
            Duration::from_millis(20),
            async || {
                let deriver = self.health().await["deriver"].clone();
                if deriver["pending"] == 0 && deriver["busy"] == false {
                    idle += 1;
                } else {
                    idle = 0;
                }
                done_if(idle >= 2, deriver)
            },
        )
        .await
        .expect("the deriver to be idle");
    }

    /// How many subscriptions the server reports on `/health`.
    pub async fn subscriptions(&self) -> u64 {
        self.health().await["subscriptions"]
            .as_u64()
            .expect("subscriptions in /health")
    }

    /// Waits, at most `within`, until this server's `/health` counts
    /// `want` subscriptions (subscribing and ending run in the background).
    pub async fn wait_for_subscriptions(&self, want: Subscriptions, within: Duration) {
        wait_for_subscriptions_at(&self.client, &self.address, want, within).await;
    }
}

/// A count of subscriptions to wait for.
#[derive(Clone, Copy, Debug)]
pub enum Subscriptions {
    Exactly(u64),
    AtLeast(u64),
}

impl Subscriptions {
    fn met_by(self, count: u64) -> bool {
        match self {
            Self::Exactly(n) => count == n,
            Self::AtLeast(n) => count >= n,
        }
    }
}

/// [`TestApp::wait_for_subscriptions`] for the server at `address` (any
/// instance).
pub async fn wait_for_subscriptions_at(
    client: &reqwest::Client,
    address: &str,
    want: Subscriptions,
    within: Duration,
) {
    let what = format!("{want:?} subscriptions at {address}");
    eventually(&what, within, async || {
        let count = health_at(client, address).await["subscriptions"].as_u64();
        match count {
            Some(n) if want.met_by(n) => Ok(()),
            _ => Err(count),
        }
    })
    .await;
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
    // Many tests post one link again and again; `retries.rs` tests reposts.
    settings.post_dedupe_secs = 0;
    // The TOP_* upkeep runs once at startup and then stays out of the way
    // of tests that count Redis commands; `feed.rs` sets its own pace.
    settings.top_upkeep_ms = 60_000;
    settings
}

/// A server on a fresh [`TestRedis`] with the [`test_settings`], once its
/// first start's background work is done.
pub async fn spawn_app() -> TestApp {
    let app = spawn_app_on(TestRedis::start().await, |_| {}).await;
    // Waiting keeps that Redis work out of tests that count commands.
    wait_for_first_pass(&app.client, &app.address).await;
    let mut conn = app.redis.conn().await;
    wait_for_top_index(&mut conn).await;
    app
}

/// Waits (at most 10 s) until the server at `address` has run its first
/// full pass over every article and group set (see `deriver.rs`).
pub async fn wait_for_first_pass(client: &reqwest::Client, address: &str) {
    let (timeout, every) = (Duration::from_secs(10), Duration::from_millis(50));
    eventually_every("the first full pass", timeout, every, async || {
        let deriver = health_at(client, address).await["deriver"].clone();
        done_if(deriver["passes"].as_u64() >= Some(1), deriver)
    })
    .await;
}

/// A server on a fresh [`TestRedis`], with the [`test_settings`] as
/// `configure` changes them: `spawn_app_with(|s| s.ws_max_subscriptions = 2)`.
/// It does not wait for the first start's indexing ([`spawn_app`] does).
pub async fn spawn_app_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_on(TestRedis::start().await, configure).await
}

/// [`spawn_app_with`] on `redis`, a Redis the test has arranged data in.
pub async fn spawn_app_on(redis: TestRedis, configure: impl FnOnce(&mut Settings)) -> TestApp {
    let mut settings = test_settings(&redis);
    configure(&mut settings);
    let instance = spawn_server(settings).await;
    TestApp {
        address: instance.address.clone(),
        metrics_port: instance.metrics_port,
        redis,
        client: reqwest::Client::new(),
        _instance: instance,
    }
}

/// A server whose TOP_* and directory upkeep ticks every 100 ms, for the
/// tests that watch it catch up with writes made behind its back.
pub async fn spawn_app_tending(redis: TestRedis) -> TestApp {
    spawn_app_on(redis, |s| s.top_upkeep_ms = 100).await
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
