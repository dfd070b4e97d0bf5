//! Closed-loop load: N workers, each with a keep-alive connection, sending
//! one request after another for a fixed time and timing each one.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The outcome of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub scenario: String,
    pub requests: u64,
    pub errors: u64,
    pub rps: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Stats {
    fn from(scenario: &str, mut micros: Vec<u32>, errors: u64, elapsed: Duration) -> Self {
        micros.sort_unstable();
        let pct = |p: f64| -> f64 {
            if micros.is_empty() {
                return 0.0;
            }
            let i = ((micros.len() as f64 * p).ceil() as usize).clamp(1, micros.len()) - 1;
            micros[i] as f64 / 1000.0
        };
        Self {
            scenario: scenario.to_owned(),
            requests: micros.len() as u64,
            errors,
            rps: micros.len() as f64 / elapsed.as_secs_f64(),
            p50_ms: pct(0.50),
            p90_ms: pct(0.90),
            p99_ms: pct(0.99),
            max_ms: micros.last().map_or(0.0, |m| *m as f64 / 1000.0),
        }
    }
}

/// Runs `op(worker, iteration)` on `workers` concurrent workers for
/// `duration` after `warmup`; `op` answers whether the request succeeded.
pub async fn run<F, Fut>(
    scenario: &str,
    workers: usize,
    warmup: Duration,
    duration: Duration,
    op: F,
) -> Stats
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + duration;
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut micros = Vec::with_capacity(4096);
                let mut errors = 0u64;
                let mut i = 0u64;
                loop {
                    let t0 = Instant::now();
                    if t0 >= end {
                        break;
                    }
                    let ok = op(w, i).await;
                    i += 1;
                    if t0 >= measure_from {
                        micros.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        if !ok {
                            errors += 1;
                        }
                    }
                }
                (micros, errors)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut errors = 0;
    for task in tasks {
        if let Ok((micros, e)) = task.await {
            all.extend(micros);
            errors += e;
        }
    }
    let stats = Stats::from(scenario, all, errors, duration);
    eprintln!(
        "  {:<28} {:>9.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  errors {}",
        stats.scenario, stats.rps, stats.p50_ms, stats.p99_ms, stats.errors
    );
    stats
}

/// A GraphQL client for one votegraph.
#[derive(Clone)]
pub struct Gql {
    client: reqwest::Client,
    url: String,
}

impl Gql {
    pub fn new(base: &str, connections: usize) -> Self {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(connections)
            .tcp_nodelay(true)
            .build()
            .expect("http client");
        Self {
            client,
            url: format!("{base}/graphql"),
        }
    }

    /// Sends a document; true for HTTP 200 without GraphQL errors.
    pub async fn post(&self, body: String, token: Option<&str>) -> bool {
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => match response.bytes().await {
                Ok(bytes) => !contains(&bytes, b"\"errors\""),
                Err(_) => false,
            },
            _ => false,
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every field of an article, as a front page asks.
pub const ARTICLE_FIELDS: &str =
    "id title link slug poster { name } postedAt votes downvotes score views groups";

pub fn page_query(page: u32) -> String {
    serde_json::json!({
        "query": format!("{{ articles(order: SCORE, page: {page}, pageSize: 25) {{ {ARTICLE_FIELDS} }} }}")
    })
    .to_string()
}

pub fn group_query(group: &str) -> String {
    serde_json::json!({
        "query": format!("{{ group(name: \"{group}\") {{ articles(page: 1, pageSize: 25) {{ {ARTICLE_FIELDS} }} }} }}")
    })
    .to_string()
}

pub fn article_query(id: u64) -> String {
    serde_json::json!({ "query": format!("{{ article(id: \"{id}\") {{ {ARTICLE_FIELDS} }} }}") })
        .to_string()
}

pub fn vote_query(id: u64) -> String {
    serde_json::json!({ "query": format!("mutation {{ vote(articleId: \"{id}\") {{ id votes score }} }}") })
        .to_string()
}

/// The Redis work of one front page, issued directly: the range read and
/// one pipeline of the same commands votegraph sends per article.
pub async fn raw_front_page(conn: &mut redis::aio::MultiplexedConnection) -> bool {
    let ids: redis::RedisResult<Vec<String>> = redis::cmd("ZREVRANGE")
        .arg("score:")
        .arg(0)
        .arg(24)
        .query_async(conn)
        .await;
    let Ok(ids) = ids else { return false };
    let mut pipe = redis::pipe();
    for member in &ids {
        // The server's own field list, so the floor is the same work.
        pipe.cmd("HMGET")
            .arg(member)
            .arg(&votegraph::store::ARTICLE_FIELDS[..]);
        pipe.cmd("ZSCORE").arg("score:").arg(member);
        pipe.cmd("SMEMBERS").arg(format!("{member}:groups"));
    }
    let replies: redis::RedisResult<Vec<redis::Value>> = pipe.query_async(conn).await;
    replies.is_ok_and(|r| r.len() == ids.len() * 3)
}
