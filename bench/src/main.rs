//! votegraph-bench: one command that measures votegraph under load.
//!
//! It starts its own `redis-server` (TCP, no persistence) and votegraph
//! processes (the release binary next to this one), seeds a data set through
//! pipelines, and drives each scenario for a fixed time with N concurrent
//! keep-alive clients, printing a Markdown table and writing JSON. Floors are
//! measured in the same run: the same Redis work issued directly (no HTTP, no
//! GraphQL), batched as votegraph sends it and one round trip at a time
//! (N+1), also behind a simulated network hop to Redis; and a Node peer
//! (Fastify + Mercurius, `peer.rs`) serving the same page from the same
//! Redis. The busy scenario (`busy.rs`) reads the logged-in front page while
//! a paced stream of `--busy-votes` votes per second lands on its articles.

mod busy;
mod load;
mod peer;
mod proxy;
mod seed;
mod subscribers;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use serde_json::json;

use load::{
    article_query, feed_query, group_query, logged_in_page_query, page_query, raw_page, vote_query,
    Gql, Stats,
};

#[derive(Parser, Debug)]
#[command(about = "Benchmark votegraph against the floor Redis sets")]
struct Args {
    /// Articles to seed.
    #[arg(long, default_value_t = 100_000)]
    articles: u64,
    /// Concurrent keep-alive clients.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Seconds each scenario is measured.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of warm-up before each measurement.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// WebSocket subscribers for the subscription scenario (0 skips it).
    #[arg(long, default_value_t = 5_000)]
    subscribers: usize,
    /// Votes per second while the subscribers listen.
    #[arg(long, default_value_t = 20.0)]
    vote_rate: f64,
    /// Votes per second (at least 1) landing on the front page's open
    /// articles, paced, each by a fresh user, while at least 200 logged-in
    /// readers read that page: the "front page, logged in, busy" scenario.
    #[arg(long, default_value_t = 70.0, value_parser = at_least_one_vote)]
    busy_votes: f64,
    /// Where the JSON results go.
    #[arg(long, default_value = "bench-results.json")]
    json: PathBuf,
    /// Use this Redis (`host:port`) instead of starting one; it is flushed and seeded.
    #[arg(long)]
    redis_addr: Option<String>,
    /// The votegraph binary (default: next to this one).
    #[arg(long)]
    votegraph: Option<PathBuf>,
    /// The redis-server program.
    #[arg(long, default_value = "redis-server")]
    redis_server: String,
    /// Logged-in users to create (three quarters vote in the load
    /// scenarios, the rest while subscribers listen).
    #[arg(long, default_value_t = 400_000)]
    users: usize,
    /// Skip the simulated-hop and N+1 runs.
    #[arg(long)]
    quick: bool,
    /// Skip the Node peer (Fastify + Mercurius).
    #[arg(long)]
    no_peer: bool,
    /// The node program that runs the peer.
    #[arg(long, default_value = "node")]
    node: String,
    /// The npm program that installs the peer's dependencies.
    #[arg(long, default_value = "npm")]
    npm: String,
    /// Run only the scenarios whose names contain one of these (repeatable),
    /// e.g. `--only uncached --only "raw Redis"` to compare one change
    /// (`subscribers` names the subscription run).
    #[arg(long)]
    only: Vec<String>,
}

impl Args {
    fn wants(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| scenario.contains(o.as_str()))
    }
}

/// `--busy-votes`: below one vote a second the page would hardly be busy,
/// and the stream's pacing needs a finite, positive rate.
fn at_least_one_vote(value: &str) -> Result<f64, String> {
    let rate: f64 = value.parse().map_err(|e| format!("{e}"))?;
    if rate.is_finite() && rate >= 1.0 {
        Ok(rate)
    } else {
        Err(format!("{value} is not at least 1 vote per second"))
    }
}

const HOP_1_BATCHED: &str = "front page, 1 ms hop, 1 client, uncached";
const RAW: &str = "raw Redis front page";
const RAW_LOGGED_IN: &str = "raw Redis front page, logged in";
const RAW_N_PLUS_1: &str = "raw Redis N+1";
const RAW_N_PLUS_1_LOGGED_IN: &str = "raw Redis N+1, logged in";
const RAW_HOP_N_PLUS_1: &str = "raw Redis N+1, 1 ms hop";
const RAW_HOP_1_BATCHED: &str = "raw Redis front page, 1 ms hop, 1 client";
const RAW_HOP_1_N_PLUS_1: &str = "raw Redis N+1, 1 ms hop, 1 client";

/// The subscription runs (name, document), each on a fresh server with
/// voters of its own.
const SUBSCRIPTION_RUNS: [(&str, &str); 2] = [
    ("subscribers", subscribers::SCORES),
    ("subscribers, article", subscribers::WITH_ARTICLE),
];

/// How a votegraph under test is configured.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// As shipped: batching and the anonymous response cache.
    Default,
    /// No response cache: every request does its Redis work.
    Uncached,
}

/// Runs a scenario that sends one fixed anonymous document.
async fn fixed(
    gql: &Gql,
    name: &str,
    body: String,
    n: usize,
    warmup: Duration,
    duration: Duration,
) -> Stats {
    let (g, body) = (gql.clone(), Arc::new(body));
    load::run(name, n, warmup, duration, move |_, _| {
        let (g, body) = (g.clone(), body.clone());
        async move { g.post(body.as_str().to_owned(), None).await }
    })
    .await
}

/// Runs the logged-in front page: distinct readers in turn, each with their
/// own `myVote` on every article, the same sequence of readers on any server.
async fn logged_in(
    gql: &Gql,
    name: &str,
    users: usize,
    n: usize,
    warmup: Duration,
    duration: Duration,
) -> Stats {
    let (g, next, body) = (
        gql.clone(),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(logged_in_page_query()),
    );
    load::run(name, n, warmup, duration, move |_, _| {
        let (g, body) = (g.clone(), body.clone());
        let user = next.fetch_add(1, Ordering::Relaxed) % users;
        async move {
            g.post(body.as_str().to_owned(), Some(&seed::token(user)))
                .await
        }
    })
    .await
}

/// Waits (up to 10 minutes) until the server's first upkeep has built the
/// `TOP_*` rankings and the group directory from the seeded keys.
async fn wait_for_top_index(conn: &redis::aio::MultiplexedConnection) -> anyhow::Result<()> {
    let mut conn = conn.clone();
    for _ in 0..6000 {
        let built: u32 = redis::cmd("EXISTS")
            .arg("index:top:built")
            .arg("index:groups:built")
            .query_async(&mut conn)
            .await?;
        if built == 2 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("the TOP_* rankings were not built within 10 minutes")
}

/// A server's response-cache counters (logged-in pages' templates
/// included), as `/health` gives them.
#[derive(Clone, Copy, Default)]
struct CacheCounts {
    hits: u64,
    misses: u64,
    evicted_by_votes: u64,
    patched_by_votes: u64,
}

impl CacheCounts {
    /// What the counters moved by since `before`.
    fn since(self, before: Self) -> Self {
        Self {
            hits: self.hits.saturating_sub(before.hits),
            misses: self.misses.saturating_sub(before.misses),
            evicted_by_votes: self
                .evicted_by_votes
                .saturating_sub(before.evicted_by_votes),
            patched_by_votes: self
                .patched_by_votes
                .saturating_sub(before.patched_by_votes),
        }
    }
}

/// The response-cache counters of a server, from `/health` (zero when it
/// does not answer).
async fn cache_stats(base: &str) -> CacheCounts {
    let body: serde_json::Value = match reqwest::get(format!("{base}/health")).await {
        Ok(r) => r.json().await.unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    };
    let c = &body["responseCache"];
    CacheCounts {
        hits: c["hits"].as_u64().unwrap_or(0),
        misses: c["misses"].as_u64().unwrap_or(0),
        evicted_by_votes: c["evictedByVotes"].as_u64().unwrap_or(0),
        patched_by_votes: c["patchedByVotes"].as_u64().unwrap_or(0),
    }
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn start_redis(program: &str, dir: &std::path::Path) -> anyhow::Result<(Proc, String)> {
    let port = free_port()?;
    let child = Command::new(program)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    let proc = Proc(child);
    let addr = format!("127.0.0.1:{port}");
    for _ in 0..100 {
        if let Ok(client) = redis::Client::open(format!("redis://{addr}")) {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                if redis::cmd("PING")
                    .query_async::<String>(&mut c)
                    .await
                    .is_ok()
                {
                    return Ok((proc, addr));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("redis-server did not start")
}

/// Starts votegraph on `redis_addr` and returns it with its start-up time
/// (spawn to first healthy answer).
async fn start_votegraph(
    bin: &PathBuf,
    redis_addr: &str,
    mode: Mode,
) -> anyhow::Result<(Proc, String, f64)> {
    let port = free_port()?;
    let started = Instant::now();
    let mut command = Command::new(bin);
    command
        .args([
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--redis-url",
            &format!("redis://{redis_addr}"),
        ])
        // Votes are still counted against a per-user limit (its cost is
        // measured), but set out of reach, so a run with few `--users`
        // measures votes rather than refusals.
        .args(["--rate-vote", "1000000000/60"])
        // The TOP_* upkeep is per second, not per request (docs/performance.md
        // gives its cost): after its first round, keep it out of the per-request
        // Redis counts.
        .args(["--top-upkeep-ms", "60000"])
        .env("RUST_LOG", "warn")
        // Every simulated subscriber connects from 127.0.0.1, so the
        // per-address limits would refuse all but the first few, and 5,000
        // subscribers are more than the default connection cap.
        .env("VOTEGRAPH_WS_MAX_CONNECTIONS_PER_CLIENT", "1000000")
        .env("VOTEGRAPH_MAX_CONNECTIONS_PER_CLIENT", "1000000")
        .env("VOTEGRAPH_MAX_CONNECTIONS", "1000000")
        .stdout(Stdio::null());
    if mode != Mode::Default {
        command.arg("--no-response-cache");
    }
    let proc = Proc(
        command
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?,
    );
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    for _ in 0..1000 {
        if let Ok(r) = client.get(format!("{base}/health")).send().await {
            if r.status().is_success() {
                return Ok((proc, base, started.elapsed().as_secs_f64() * 1000.0));
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    bail!("votegraph did not become healthy")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin = match &args.votegraph {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("votegraph"),
    };
    let (warmup, duration) = (
        Duration::from_secs_f64(args.warmup),
        Duration::from_secs_f64(args.duration),
    );
    let n = args.connections;
    let dir = tempfile::tempdir()?;
    let (_redis, redis_addr) = match &args.redis_addr {
        Some(addr) => (None, addr.clone()),
        None => {
            let (p, a) = start_redis(&args.redis_server, dir.path()).await?;
            (Some(p), a)
        }
    };
    let client = redis::Client::open(votegraph::connection_info(&format!(
        "redis://{redis_addr}"
    ))?)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let seeded = seed::seed(&mut conn, args.articles).await?;
    if seeded.open.is_empty() {
        bail!("no article is open to voting; seed more articles");
    }
    // Users 0..3/4 vote in the load scenarios, the rest while subscribers
    // listen: a repeated vote is a no-op and would publish nothing.
    let load_users = (args.users * 3 / 4).max(1);
    // The busy scenario reads as the load users, but as at least
    // MIN_READERS of them: when `--users` gives fewer, the missing readers'
    // sessions are added (reading them changes nothing the others use).
    let want_busy = args.wants(busy::NAME);
    let busy_readers = load_users.max(busy::MIN_READERS);
    let readers_needed = if want_busy { busy_readers } else { 0 };
    seed::sessions(&mut conn, 0..args.users.max(readers_needed)).await?;
    // Its voters come after every other user, the subscription runs'
    // voters included (who may go past `--users`), so each of its votes is
    // a fresh user's and moves a score, and no later vote is a no-op for
    // having been cast by it.
    let votes_per_run = (args.vote_rate * args.duration).ceil() as usize + 1;
    let busy_first_voter = (load_users + SUBSCRIPTION_RUNS.len() * votes_per_run)
        .max(args.users)
        .max(readers_needed);
    let busy_voters = busy::voters_needed(args.busy_votes, warmup, duration);
    if want_busy {
        seed::sessions(&mut conn, busy_first_voter..busy_first_voter + busy_voters).await?;
    }

    load::install_probe(conn.clone());
    let (server, base, startup_ms) = start_votegraph(&bin, &redis_addr, Mode::Default).await?;
    let pid = server.0.id();
    load::probe_server(Some(pid));
    // The first start derives the TOP_* rankings and the group directory
    // from the seeded book keys in the background; measuring meanwhile
    // would count that work against the first scenarios.
    let indexing = Instant::now();
    wait_for_top_index(&conn).await?;
    eprintln!(
        "votegraph started in {startup_ms:.0} ms, derived its indexes in {:.1} s; {n} connections, {:.0} s per scenario",
        indexing.elapsed().as_secs_f64(),
        args.duration
    );
    let gql = Gql::new(&base, n);
    let open = Arc::new(seeded.open.clone());
    let next_user = Arc::new(AtomicUsize::new(0));
    let mut results: Vec<Stats> = Vec::new();

    // As shipped: batching and the anonymous response cache.
    for (name, body) in [
        ("front page", page_query(1)),
        ("deep page (400)", page_query(400)),
        ("group page, warm", group_query("g00")),
    ] {
        if args.wants(name) {
            results.push(fixed(&gql, name, body, n, warmup, duration).await);
        }
    }
    // As a browser asks: compressed. A cached page keeps its compressed
    // form; a logged-in page is compressed on every request.
    const COMPRESSED: &str = "front page (br)";
    if args.wants(COMPRESSED) {
        let gql_br = Gql::accepting(&base, n, "gzip, deflate, br");
        results.push(fixed(&gql_br, COMPRESSED, page_query(1), n, warmup, duration).await);
    }
    const LOGGED_IN_COMPRESSED: &str = "logged-in page (br)";
    if args.wants(LOGGED_IN_COMPRESSED) {
        let (g, users, body) = (
            Gql::accepting(&base, n, "gzip, deflate, br"),
            next_user.clone(),
            Arc::new(logged_in_page_query()),
        );
        results.push(
            load::run(LOGGED_IN_COMPRESSED, n, warmup, duration, move |_, _| {
                let (g, body) = (g.clone(), body.clone());
                let user = users.fetch_add(1, Ordering::Relaxed) % load_users;
                async move {
                    g.post(body.as_str().to_owned(), Some(&seed::token(user)))
                        .await
                }
            })
            .await,
        );
    }
    const LOGGED_IN: &str = "front page, logged in";
    if args.wants(LOGGED_IN) {
        results.push(logged_in(&gql, LOGGED_IN, load_users, n, warmup, duration).await);
    }
    if args.wants("article by id") {
        let (g, ids) = (gql.clone(), open.clone());
        results.push(
            load::run("article by id", n, warmup, duration, move |w, i| {
                let g = g.clone();
                let id = ids[((w as u64 * 7919 + i * 104_729) % ids.len() as u64) as usize];
                async move { g.post(article_query(id), None).await }
            })
            .await,
        );
    }
    if args.wants("vote (distinct users)") {
        let (g, ids, users) = (gql.clone(), open.clone(), next_user.clone());
        results.push(
            load::run("vote (distinct users)", n, warmup, duration, move |w, i| {
                let g = g.clone();
                let user = users.fetch_add(1, Ordering::Relaxed) % load_users;
                let id =
                    ids[((w as u64 * 31 + i * 7_727 + user as u64) % ids.len() as u64) as usize];
                async move { g.post(vote_query(id), Some(&seed::token(user))).await }
            })
            .await,
        );
    }
    let mut hit_rate = None;
    const MIX: &str = "mix 90% read / 10% vote";
    if args.wants(MIX) {
        let cache_before = cache_stats(&base).await;
        let (g, ids, users) = (gql.clone(), open.clone(), next_user.clone());
        results.push(
            load::run(MIX, n, warmup, duration, move |w, i| {
                let g = g.clone();
                let vote = (w as u64 + i).is_multiple_of(10);
                let user = users.fetch_add(1, Ordering::Relaxed) % load_users;
                let id = ids[((w as u64 * 31 + i * 7_727) % ids.len() as u64) as usize];
                async move {
                    if vote {
                        g.post(vote_query(id), Some(&seed::token(user))).await
                    } else {
                        g.post(page_query(1), None).await
                    }
                }
            })
            .await,
        );
        let cache = cache_stats(&base).await.since(cache_before);
        let (hits, misses) = (cache.hits, cache.misses);
        hit_rate = Some(hits as f64 / (hits + misses).max(1) as f64);
        eprintln!("  response cache during the mix: {hits} hits, {misses} misses");
    }
    // Logged-in readers while others vote: the votes reach the shared
    // templates their articles are on (see `src/templates.rs`: patched,
    // or dropped and computed again when they reorder a page).
    const MIX_LOGGED_IN: &str = "mix with logged-in readers, 90% read / 10% vote";
    if args.wants(MIX_LOGGED_IN) {
        let (g, ids, users) = (gql.clone(), open.clone(), next_user.clone());
        let body = Arc::new(logged_in_page_query());
        results.push(
            load::run(MIX_LOGGED_IN, n, warmup, duration, move |w, i| {
                let (g, body) = (g.clone(), body.clone());
                let vote = (w as u64 + i).is_multiple_of(10);
                let user = users.fetch_add(1, Ordering::Relaxed) % load_users;
                let id = ids[((w as u64 * 31 + i * 7_727) % ids.len() as u64) as usize];
                async move {
                    let token = seed::token(user);
                    if vote {
                        g.post(vote_query(id), Some(&token)).await
                    } else {
                        g.post(body.as_str().to_owned(), Some(&token)).await
                    }
                }
            })
            .await,
        );
    }
    // Logged-in readers while a paced stream of votes lands on the page
    // they read (see `busy.rs`). Only the page requests are timed; the cost
    // columns include the votes' own Redis commands and server CPU, spread
    // over the page requests, as that is what the busy page costs.
    if want_busy {
        let targets = busy::targets(&gql, &seeded.open).await?;
        let cache_before = cache_stats(&base).await;
        let stream = busy::start(
            Gql::new(&base, 16),
            targets,
            args.busy_votes,
            busy_first_voter,
            busy_voters,
            warmup,
            duration,
        );
        let mut stats = logged_in(&gql, busy::NAME, busy_readers, n, warmup, duration).await;
        let mut votes = stream.stop(busy_readers).await;
        let cache = cache_stats(&base).await.since(cache_before);
        votes.cache_hits = cache.hits;
        votes.cache_misses = cache.misses;
        votes.cache_evicted_by_votes = cache.evicted_by_votes;
        votes.cache_patched_by_votes = cache.patched_by_votes;
        eprintln!(
            "  busy: {:.1} votes/s landed, {} errors ({} sent in {} s on {} front-page articles, {} readers; response cache {} hits, {} misses, {} entries patched and {} dropped by votes)",
            votes.landed_per_s,
            votes.errors,
            votes.sent,
            args.duration,
            votes.articles.len(),
            votes.readers,
            votes.cache_hits,
            votes.cache_misses,
            votes.cache_patched_by_votes,
            votes.cache_evicted_by_votes,
        );
        // A refused vote is the scenario's error: the page was not as busy
        // as its name says.
        stats.errors += votes.errors;
        stats.vote_stream = Some(votes);
        results.push(stats);
    }
    let rss_after_load = subscribers::rss_kib(pid);

    // The Node peer on the same pages, checked against this server first.
    let (want_peer_logged_in, want_peer_uncached) =
        (args.wants(peer::LOGGED_IN), args.wants(peer::UNCACHED));
    let (peer_report, peer_failure) =
        if !args.no_peer && (want_peer_logged_in || want_peer_uncached) {
            let run = peer::Run {
                node: &args.node,
                npm: &args.npm,
                redis_addr: &redis_addr,
                votegraph: &base,
                open: &seeded.open,
                users: load_users,
                logged_in: want_peer_logged_in,
                uncached: want_peer_uncached,
                connections: n,
                warmup,
                duration,
            };
            peer::measure(run, &mut results).await
        } else {
            (json!({ "status": "not run" }), None)
        };
    drop(server);

    // Without the response cache: every request does its Redis work.
    const COLD: &str = "group page, cold, uncached";
    const TOP_WEEK: &str = "TOP_WEEK first page, uncached";
    const DEEP_FEED: &str = "feed after a deep cursor (rank 50,000), uncached";
    let uncached_names = [
        "front page, uncached",
        "group page, warm, uncached",
        COLD,
        TOP_WEEK,
        DEEP_FEED,
    ];
    if uncached_names.iter().any(|name| args.wants(name)) {
        let (uncached, ubase, _) = start_votegraph(&bin, &redis_addr, Mode::Uncached).await?;
        load::probe_server(Some(uncached.0.id()));
        let ugql = Gql::new(&ubase, n);
        for (name, body) in [
            (uncached_names[0], page_query(1)),
            (uncached_names[1], group_query("g00")),
        ] {
            if args.wants(name) {
                results.push(fixed(&ugql, name, body, n, warmup, duration).await);
            }
        }
        if args.wants(COLD) {
            let (g, c) = (ugql.clone(), conn.clone());
            results.push(
                load::run(COLD, n, warmup, duration, move |w, i| {
                    let (g, mut c) = (g.clone(), c.clone());
                    // Drop the cached ranking of one of the five biggest
                    // groups first; that DEL is included in the time.
                    let group = seed::group_name(((w as u64 + i) % 5) as usize);
                    async move {
                        let _: redis::RedisResult<()> = redis::cmd("DEL")
                            .arg(format!("score:{group}"))
                            .query_async(&mut c)
                            .await;
                        g.post(group_query(&group), None).await
                    }
                })
                .await,
            );
        }
        if args.wants(TOP_WEEK) {
            let body = feed_query("TOP_WEEK", 25, None);
            results.push(fixed(&ugql, TOP_WEEK, body, n, warmup, duration).await);
        }
        if args.wants(DEEP_FEED) {
            // Scroll 500 pages of 100 down the score feed, then read the
            // page after that cursor over and over.
            let mut cursor = None;
            for _ in 0..500 {
                match ugql
                    .end_cursor(feed_query("SCORE", 100, cursor.as_deref()))
                    .await
                {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            let body = feed_query("SCORE", 25, cursor.as_deref());
            results.push(fixed(&ugql, DEEP_FEED, body, n, warmup, duration).await);
        }
        drop(uncached);
    }

    // The floor: the same Redis work as a front page, straight from here.
    load::probe_server(None);
    for (name, reader) in [(RAW, false), (RAW_LOGGED_IN, true)] {
        if args.wants(name) {
            let page = raw_page(&redis_addr, 8, false, reader, load_users).await?;
            results.push(load::run(name, n, warmup, duration, page).await);
        }
    }

    if !args.quick {
        let hop = proxy::start(redis_addr.clone(), Duration::from_millis(1))?;
        let hop_addr = format!("127.0.0.1:{hop}");
        // The N+1 baseline: the same commands, one round trip at a time,
        // from here (no server needed to be slow).
        load::probe_server(None);
        for (redis, name, clients, n_plus_1, reader) in [
            (&redis_addr, RAW_N_PLUS_1, n, true, false),
            (&redis_addr, RAW_N_PLUS_1_LOGGED_IN, n, true, true),
            (&hop_addr, RAW_HOP_N_PLUS_1, n, true, false),
            (&hop_addr, RAW_HOP_1_BATCHED, 1, false, false),
            (&hop_addr, RAW_HOP_1_N_PLUS_1, 1, true, false),
        ] {
            if args.wants(name) {
                let conns = clients.min(8);
                let page = raw_page(redis, conns, n_plus_1, reader, load_users).await?;
                results.push(load::run(name, clients, warmup, duration, page).await);
            }
        }
        // votegraph behind the hop, batched; with one client, latency, not
        // CPU, sets the pace, and the round trips batching saves show in full.
        for (name, clients) in [("front page, 1 ms hop, uncached", n), (HOP_1_BATCHED, 1)] {
            if !args.wants(name) {
                continue;
            }
            let (p, pbase, _) = start_votegraph(&bin, &hop_addr, Mode::Uncached).await?;
            load::probe_server(Some(p.0.id()));
            results.push(
                fixed(
                    &Gql::new(&pbase, clients),
                    name,
                    page_query(1),
                    clients,
                    warmup,
                    duration,
                )
                .await,
            );
            drop(p);
        }
    }

    // Each subscription run on a fresh server, with voters of its own (a
    // repeated vote publishes nothing).
    let mut sub_stats = Vec::new();
    for (name, document) in SUBSCRIPTION_RUNS {
        if args.subscribers == 0 || !args.wants(name) {
            continue;
        }
        let (sproc, sbase, _) = start_votegraph(&bin, &redis_addr, Mode::Default).await?;
        eprintln!("{name}: {document}");
        let stats = subscribers::run(
            &sbase,
            sproc.0.id(),
            document,
            args.subscribers,
            args.vote_rate,
            duration,
            &seeded.open,
            load_users + sub_stats.len() * votes_per_run,
        )
        .await?;
        drop(sproc);
        sub_stats.push(stats);
    }

    let scenario = |name: &str| results.iter().find(|s| s.scenario == name);
    let rps = |name: &str| scenario(name).map(|s| s.rps);
    let p50 = |name: &str| scenario(name).map(|s| s.p50_ms);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    };
    let p99 = |name: &str| scenario(name).map(|s| s.p99_ms);
    let cpu = |name: &str| scenario(name).and_then(|s| s.server_cpu_us_per_request);
    // req/s ratios are votegraph ÷ the other; the N+1 ones compare
    // votegraph's batched page with the bench's own raw N+1 baseline, which
    // has no HTTP or GraphQL to pay for: a lower bound of what batching buys.
    let ratios = json!({
        "front_page_vs_raw_redis": ratio(rps("front page"), rps(RAW)),
        "front_page_uncached_vs_raw_redis": ratio(rps("front page, uncached"), rps(RAW)),
        "logged_in_vs_raw_redis": ratio(rps(LOGGED_IN), rps(RAW_LOGGED_IN)),
        "logged_in_vs_node_peer": ratio(rps(LOGGED_IN), rps(peer::LOGGED_IN)),
        "logged_in_cpu_per_request_node_peer_vs_votegraph": ratio(cpu(peer::LOGGED_IN), cpu(LOGGED_IN)),
        "node_peer_logged_in_vs_raw_redis": ratio(rps(peer::LOGGED_IN), rps(RAW_LOGGED_IN)),
        "front_page_uncached_vs_node_peer": ratio(rps("front page, uncached"), rps(peer::UNCACHED)),
        "batched_vs_raw_n_plus_1": ratio(rps("front page, uncached"), rps(RAW_N_PLUS_1)),
        "raw_batched_vs_raw_n_plus_1": ratio(rps(RAW), rps(RAW_N_PLUS_1)),
        "batched_vs_raw_n_plus_1_with_1ms_hop": ratio(rps("front page, 1 ms hop, uncached"), rps(RAW_HOP_N_PLUS_1)),
        "batched_vs_raw_n_plus_1_with_1ms_hop_1_client": ratio(rps(HOP_1_BATCHED), rps(RAW_HOP_1_N_PLUS_1)),
        "raw_batched_vs_raw_n_plus_1_with_1ms_hop_1_client": ratio(rps(RAW_HOP_1_BATCHED), rps(RAW_HOP_1_N_PLUS_1)),
        "raw_logged_in_batched_vs_raw_n_plus_1": ratio(rps(RAW_LOGGED_IN), rps(RAW_N_PLUS_1_LOGGED_IN)),
        "group_cold_vs_warm_p50": ratio(p50("group page, cold, uncached"), p50("group page, warm, uncached")),
        "busy_vs_raw_redis": ratio(rps(busy::NAME), rps(RAW_LOGGED_IN)),
        "busy_p99_vs_logged_in_p99": ratio(p99(busy::NAME), p99(LOGGED_IN)),
        "group_page_p99_vs_front_page_p99": ratio(p99("group page, warm"), p99("front page")),
        "mix_response_cache_hit_rate": hit_rate,
    });

    println!(
        "\nvotegraph-bench: {} articles, {} connections, {:.0} s per scenario, {} CPUs\n",
        args.articles,
        n,
        args.duration,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("| scenario | req/s | p50 ms | p90 ms | p99 ms | max ms | errors | Redis cmds/req | server CPU µs/req |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for s in &results {
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            s.scenario,
            s.rps,
            s.p50_ms,
            s.p90_ms,
            s.p99_ms,
            s.max_ms,
            s.errors,
            load::shown(s.redis_commands_per_request),
            load::shown(s.server_cpu_us_per_request)
        );
    }
    println!(
        "\nstart-up {startup_ms:.0} ms; resident memory after the load {} MiB",
        rss_after_load / 1024
    );
    let shown = |key: &str| {
        ratios[key]
            .as_f64()
            .map_or("-".into(), |r| format!("{r:.2}"))
    };
    if ratios["logged_in_vs_node_peer"].is_f64() {
        println!(
            "logged-in front page: votegraph ÷ Node peer {}× req/s (the peer spends {}× votegraph's CPU per request); votegraph ÷ raw-Redis floor {}×",
            shown("logged_in_vs_node_peer"),
            shown("logged_in_cpu_per_request_node_peer_vs_votegraph"),
            shown("logged_in_vs_raw_redis"),
        );
    } else if let Some(reason) = peer_report["reason"].as_str() {
        println!("Node peer not measured: {reason}");
    }
    let busy_votes = results
        .iter()
        .find(|s| s.scenario == busy::NAME)
        .and_then(|s| s.vote_stream.as_ref());
    if let Some(votes) = busy_votes {
        println!(
            "busy logged-in front page ({:.1} votes/s landed, {} vote errors): busy ÷ raw-Redis logged-in floor {}× req/s; busy p99 ÷ quiet logged-in p99 {}×",
            votes.landed_per_s,
            votes.errors,
            shown("busy_vs_raw_redis"),
            shown("busy_p99_vs_logged_in_p99"),
        );
    }
    if ratios["group_page_p99_vs_front_page_p99"].is_f64() {
        println!(
            "group page p99 ÷ front page p99 {}×",
            shown("group_page_p99_vs_front_page_p99")
        );
    }
    println!("ratios: {}", serde_json::to_string(&ratios)?);
    for s in &sub_stats {
        println!(
            "\nsubscribers of `{}`: {} connected, {} votes at {:.0}/s → {} of {} events delivered, {:.0} deliveries/s, latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms; server CPU {:.1} µs per delivery ({:.2} cores), bench clients {:.1} µs per delivery ({:.2} cores); {:.1} KiB per subscriber ({} → {} KiB)",
            s.document, s.subscribers, s.votes, args.vote_rate, s.delivered, s.expected_deliveries, s.deliveries_per_sec, s.p50_ms, s.p99_ms, s.max_ms, s.server_cpu_us_per_delivery, s.server_cores, s.bench_cpu_us_per_delivery, s.bench_cores, s.kib_per_subscriber, s.rss_idle_kib, s.rss_subscribed_kib
        );
    }
    let out = json!({
        "articles": args.articles,
        "connections": n,
        "duration_s": args.duration,
        "cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "startup_ms": startup_ms,
        "rss_after_load_kib": rss_after_load,
        "scenarios": results,
        "ratios": ratios,
        "node_peer": peer_report,
        "subscribers": sub_stats,
    });
    std::fs::write(&args.json, serde_json::to_string_pretty(&out)?)?;
    eprintln!("wrote {}", args.json.display());
    if let Some(why) = peer_failure {
        bail!("the Node peer's page differs from votegraph's: {why}");
    }
    Ok(())
}
