//! Closed-loop load: N workers, each with a keep-alive connection, sending
//! one request after another for a fixed time and timing each one.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use votegraph_store::keys;

/// The outcome of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub scenario: String,
    pub requests: u64,
    /// Requests sent in all, warm-up included (what the cost counters saw).
    #[serde(skip)]
    pub sent: u64,
    pub errors: u64,
    pub rps: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Commands Redis ran per request (`INFO commandstats`, commands run by
    /// scripts included): Redis CPU is the floor every instance shares.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_commands_per_request: Option<f64>,
    /// CPU the votegraph process spent per request, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_us_per_request: Option<f64>,
    /// The votes that landed while the busy scenario read (its only
    /// scenario with a stream beside the measured requests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vote_stream: Option<crate::busy::VoteStream>,
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
            sent: 0,
            redis_commands_per_request: None,
            server_cpu_us_per_request: None,
            vote_stream: None,
        }
    }
}

/// Reads what the scenarios cost: the commands Redis ran (`INFO
/// commandstats`, so commands run by scripts count too) and the CPU of the
/// votegraph process under test. Installed once; the server it watches
/// changes as scenarios start their own.
struct Probe {
    redis: redis::aio::MultiplexedConnection,
    server: Mutex<Option<u32>>,
}

static PROBE: OnceLock<Probe> = OnceLock::new();

/// Starts measuring every scenario's cost on `redis`.
pub fn install_probe(redis: redis::aio::MultiplexedConnection) {
    let _ = PROBE.set(Probe {
        redis,
        server: Mutex::new(None),
    });
}

/// The votegraph process the next scenarios run against (None: no server,
/// as for the raw-Redis floor).
pub fn probe_server(pid: Option<u32>) {
    if let Some(probe) = PROBE.get() {
        *probe.server.lock().unwrap_or_else(|p| p.into_inner()) = pid;
    }
}

/// Redis commands so far (the probe's own INFO calls left out), and the
/// server's CPU seconds.
async fn counters() -> (Option<u64>, Option<f64>) {
    let Some(probe) = PROBE.get() else {
        return (None, None);
    };
    let mut conn = probe.redis.clone();
    let info: Option<String> = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .ok();
    let commands = info.map(|info| {
        info.lines()
            .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    });
    let pid = *probe.server.lock().unwrap_or_else(|p| p.into_inner());
    (commands, pid.map(crate::subscribers::cpu_secs))
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
    let (commands_before, cpu_before) = counters().await;
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
                (micros, errors, i)
            })
        })
        .collect();
    let mut all = Vec::new();
    let (mut errors, mut sent) = (0, 0);
    for task in tasks {
        if let Ok((micros, e, n)) = task.await {
            all.extend(micros);
            errors += e;
            sent += n;
        }
    }
    let mut stats = Stats::from(scenario, all, errors, duration);
    stats.sent = sent;
    let (commands_after, cpu_after) = counters().await;
    let per_request = sent.max(1) as f64;
    stats.redis_commands_per_request = commands_before
        .zip(commands_after)
        .map(|(a, b)| b.saturating_sub(a) as f64 / per_request);
    stats.server_cpu_us_per_request = cpu_before
        .zip(cpu_after)
        .map(|(a, b)| (b - a).max(0.0) * 1e6 / per_request);
    eprintln!(
        "  {:<28} {:>9.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  errors {}  cmds/req {}  CPU µs/req {}",
        stats.scenario,
        stats.rps,
        stats.p50_ms,
        stats.p99_ms,
        stats.errors,
        shown(stats.redis_commands_per_request),
        shown(stats.server_cpu_us_per_request)
    );
    stats
}

/// A measured figure for the table, or "-".
pub fn shown(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"))
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

    /// Like [`Gql::new`], sending `Accept-Encoding: <coding>` as browsers
    /// do. Bodies come back compressed and are not decoded (that is the
    /// client's cost, not the server's), so a GraphQL error inside one is
    /// not noticed: only the status counts.
    pub fn accepting(base: &str, connections: usize, coding: &'static str) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::ACCEPT_ENCODING,
            reqwest::header::HeaderValue::from_static(coding),
        );
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(connections)
            .tcp_nodelay(true)
            .default_headers(headers)
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

/// A page of the site feed in `order` (a GraphQL enum name), after a
/// cursor or from the top, with every field of each article.
pub fn feed_query(order: &str, first: u32, after: Option<&str>) -> String {
    serde_json::json!({
        "query": format!("query($a: String) {{ feed(order: {order}, first: {first}, after: $a) {{ pageInfo {{ hasNextPage endCursor }} edges {{ cursor node {{ {ARTICLE_FIELDS} }} }} }} }}"),
        "variables": { "a": after },
    })
    .to_string()
}

impl Gql {
    /// The JSON a document answers (None when the request failed).
    async fn answer(&self, body: String) -> Option<serde_json::Value> {
        let response = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .ok()?;
        response.json().await.ok()
    }

    /// The end cursor of a feed page (None when the page has none or the
    /// request failed): how the bench scrolls to a deep position.
    pub async fn end_cursor(&self, body: String) -> Option<String> {
        let json = self.answer(body).await?;
        json["data"]["feed"]["pageInfo"]["endCursor"]
            .as_str()
            .map(str::to_owned)
    }

    /// The ids of the `articles` a document answers, in order (None when
    /// the request failed or answered errors): how the busy scenario finds
    /// what is on the page it votes on.
    pub async fn article_ids(&self, body: String) -> Option<Vec<u64>> {
        let json = self.answer(body).await?;
        if json.get("errors").is_some() {
            return None;
        }
        json["data"]["articles"]
            .as_array()?
            .iter()
            .map(|article| article["id"].as_str()?.parse().ok())
            .collect()
    }
}

/// The front page as a logged-in reader sees it: every field and the
/// reader's own vote on each article.
pub fn logged_in_page_query() -> String {
    serde_json::json!({
        "query": format!("{{ articles(order: SCORE, page: 1, pageSize: 25) {{ {ARTICLE_FIELDS} myVote }} }}")
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

/// A vote in `direction` (a `VoteDirection` name: UP, DOWN or NONE),
/// answering what [`vote_query`] answers.
pub fn vote_query_in(id: u64, direction: &str) -> String {
    serde_json::json!({ "query": format!("mutation {{ vote(articleId: \"{id}\", direction: {direction}) {{ id votes score }} }}") })
        .to_string()
}

/// A request of a raw-Redis scenario, boxed: the scenarios differ in what
/// they send, and one allocation is nothing next to a Redis round trip.
pub type RawRequest = std::pin::Pin<Box<dyn Future<Output = bool> + Send>>;

/// How long a raw-Redis scenario waits for one reply.
const RAW_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A raw-Redis scenario's request maker over `connections` connections to
/// `addr`: the front page batched as votegraph sends it, or N+1, for
/// anonymous readers or for logged-in ones taken in turn from `users` (as
/// the logged-in scenarios take them).
pub async fn raw_page(
    addr: &str,
    connections: usize,
    n_plus_1: bool,
    logged_in: bool,
    users: usize,
) -> anyhow::Result<impl Fn(usize, u64) -> RawRequest + Send + Sync + 'static> {
    let client = redis::Client::open(votegraph_store::connection_info(&format!(
        "redis://{addr}"
    ))?)?;
    // redis-rs' default reply timeout is shorter than a loaded small
    // machine sometimes takes: the floor would count the client's
    // impatience as errors. A wider bound still ends every wait.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(RAW_REPLY_TIMEOUT));
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections.max(1) {
        conns.push(
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await?,
        );
    }
    let next_user = std::sync::atomic::AtomicUsize::new(0);
    Ok(move |w: usize, _| -> RawRequest {
        let mut conn = conns[w % conns.len()].clone();
        let session = logged_in.then(|| {
            let user = next_user.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % users.max(1);
            session_key(&crate::seed::token(user))
        });
        Box::pin(async move {
            if n_plus_1 {
                raw_n_plus_1(&mut conn, session.as_deref()).await
            } else {
                raw_front_page(&mut conn, session.as_deref()).await
            }
        })
    })
}

/// The session key votegraph reads for a login token.
pub fn session_key(token: &str) -> String {
    keys::session(&votegraph_api::auth::token_hash(token))
}

/// The page's ranking with scores: `ZREVRANGE score: 0 24 WITHSCORES`.
async fn front_page_range(
    conn: &mut redis::aio::MultiplexedConnection,
) -> redis::RedisResult<Vec<(String, f64)>> {
    redis::cmd("ZREVRANGE")
        .arg(keys::SCORE)
        .arg(0)
        .arg(24)
        .arg("WITHSCORES")
        .query_async(conn)
        .await
}

/// The reader's vote index (`user:<name>:votes`) from their session, or
/// None.
async fn session_votes(
    conn: &mut redis::aio::MultiplexedConnection,
    session: &str,
) -> redis::RedisResult<Option<String>> {
    let name: Option<String> = redis::cmd("GET").arg(session).query_async(conn).await?;
    Ok(name.map(|n| keys::user_votes(&n)))
}

/// The Redis work of one front page, issued directly, as votegraph batches
/// it: the range read (with the reader's session alongside when `session`
/// is given), then one pipeline of each article's hash (its groups
/// included) and, for a reader, one `ZMSCORE` of their votes on the page:
/// 26 commands in two round trips for an anonymous page, 28 for a
/// logged-in one.
pub async fn raw_front_page(
    conn: &mut redis::aio::MultiplexedConnection,
    session: Option<&str>,
) -> bool {
    let (page, votes) = match session {
        None => (front_page_range(conn).await, Ok(None)),
        Some(session) => {
            let mut other = conn.clone();
            futures_util::join!(front_page_range(conn), session_votes(&mut other, session))
        }
    };
    let (Ok(page), Ok(votes)) = (page, votes) else {
        return false;
    };
    let mut pipe = redis::pipe();
    for (member, _) in &page {
        // The server's own field list, so the floor is the same work.
        pipe.cmd("HMGET")
            .arg(member)
            .arg(&votegraph_store::ARTICLE_FIELDS[..]);
    }
    if let (Some(votes), false) = (&votes, page.is_empty()) {
        let zmscore = pipe.cmd("ZMSCORE").arg(votes);
        for (member, _) in &page {
            zmscore.arg(member);
        }
    }
    let expected = pipe.len();
    let replies: redis::RedisResult<Vec<redis::Value>> = pipe.query_async(conn).await;
    replies.is_ok_and(|r| r.len() == expected)
}

/// The bench's own N+1 baseline: the same Redis commands as
/// [`raw_front_page`], sent one round trip at a time — the session, the
/// range, then each article's hash and the reader's vote on it (`ZSCORE`
/// of their vote index) one after another — as
/// a server that loads each article on its own would. No HTTP or GraphQL:
/// it is the fastest any N+1 server could be, so batched ÷ this is what
/// batching buys at the least.
pub async fn raw_n_plus_1(
    conn: &mut redis::aio::MultiplexedConnection,
    session: Option<&str>,
) -> bool {
    let votes = match session {
        None => None,
        Some(session) => match session_votes(conn, session).await {
            Ok(votes) => votes,
            Err(_) => return false,
        },
    };
    let Ok(page) = front_page_range(conn).await else {
        return false;
    };
    for (member, _) in &page {
        let hash: redis::RedisResult<redis::Value> = redis::cmd("HMGET")
            .arg(member)
            .arg(&votegraph_store::ARTICLE_FIELDS[..])
            .query_async(conn)
            .await;
        if hash.is_err() {
            return false;
        }
        if let Some(votes) = &votes {
            let vote: redis::RedisResult<Option<f64>> = redis::cmd("ZSCORE")
                .arg(votes)
                .arg(member)
                .query_async(conn)
                .await;
            if vote.is_err() {
                return false;
            }
        }
    }
    true
}
