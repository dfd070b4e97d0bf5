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
//! The HTTP limit (`http_limit.rs`) is a minimal poem server answering the
//! cached front page's bytes: what HTTP alone costs.

mod busy;
mod cluster;
mod http_limit;
mod load;
mod peer;
mod proxy;
mod report;
mod scenarios;
mod seed;
mod servers;
mod subscribers;

use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Parser;

use scenarios::{Bench, BusyUsers, SUBSCRIPTION_RUNS};
use servers::{start_votegraph, Mode, Votegraph};

#[derive(Parser, Debug)]
#[command(about = "Benchmark votegraph against the floor Redis sets")]
pub struct Args {
    /// Articles to seed.
    #[arg(long, default_value_t = 100_000)]
    pub articles: u64,
    /// Concurrent keep-alive clients.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Seconds each scenario is measured.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Seconds of warm-up before each measurement.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// WebSocket subscribers for the subscription scenario (0 skips it).
    #[arg(long, default_value_t = 5_000)]
    pub subscribers: usize,
    /// Votes per second while the subscribers listen.
    #[arg(long, default_value_t = 20.0)]
    pub vote_rate: f64,
    /// Votes per second (at least 1) landing on the front page's open
    /// articles, paced, each by a fresh user, while at least 200 logged-in
    /// readers read that page: the "front page, logged in, busy" scenario.
    #[arg(long, default_value_t = 70.0, value_parser = at_least_one_vote)]
    pub busy_votes: f64,
    /// Where the JSON results go.
    #[arg(long, default_value = "bench-results.json")]
    pub json: PathBuf,
    /// Use this Redis (`host:port`) instead of starting one; it is flushed and seeded.
    #[arg(long)]
    pub redis_addr: Option<String>,
    /// The votegraph binary (default: next to this one).
    #[arg(long)]
    pub votegraph: Option<PathBuf>,
    /// The redis-server program.
    #[arg(long, default_value = "redis-server")]
    pub redis_server: String,
    /// Logged-in users to create (three quarters vote in the load
    /// scenarios, the rest while subscribers listen).
    #[arg(long, default_value_t = 400_000)]
    pub users: usize,
    /// Skip the simulated-hop and N+1 runs.
    #[arg(long)]
    pub quick: bool,
    /// Instead, compare one Redis primary with a 3-primary Redis Cluster,
    /// both seeded with `--articles` through the API (20,000 users).
    #[arg(long)]
    pub cluster: bool,
    /// Skip the Node peer (Fastify + Mercurius).
    #[arg(long)]
    pub no_peer: bool,
    /// The node program that runs the peer.
    #[arg(long, default_value = "node")]
    pub node: String,
    /// The npm program that installs the peer's dependencies.
    #[arg(long, default_value = "npm")]
    pub npm: String,
    /// Run only the scenarios whose names contain one of these (repeatable),
    /// e.g. `--only uncached --only "raw Redis"` to compare one change
    /// (`subscribers` names the subscription run).
    #[arg(long)]
    pub only: Vec<String>,
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

fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(http_limit::SERVE) {
        return http_limit::serve(&argv[2..]);
    }
    tokio::runtime::Runtime::new()?.block_on(run(Args::parse()))
}

/// Every scenario, in the order measured and reported.
async fn run(args: Args) -> anyhow::Result<()> {
    if args.cluster {
        let bin = votegraph_bin(&args)?;
        return cluster::run(&args, bin).await;
    }
    let (_redis, mut bench) = prepare(args).await?;
    let server = start_shipped(&mut bench).await?;
    bench.front_page(&server).await;
    bench.http_limit(&server).await?;
    bench.cached_pages(&server).await;
    bench.compressed_pages(&server).await;
    bench.logged_in_page(&server).await;
    bench.article_by_id(&server).await;
    bench.votes(&server).await;
    let mix_hit_rate = bench.mixes(&server).await;
    bench.busy_page(&server).await?;
    let rss_after_load_kib = subscribers::rss_kib(server.proc.id());
    let (peer, peer_failure) = bench.node_peer(&server).await;
    drop(server);
    bench.uncached_pages().await?;
    bench.raw_redis_floors().await?;
    if !bench.args.quick {
        bench.behind_a_hop().await?;
    }
    let subscriptions = bench.subscriptions().await?;

    let report = report::Report {
        articles: bench.args.articles,
        connections: bench.n,
        duration_s: bench.args.duration,
        vote_rate: bench.args.vote_rate,
        startup_ms: bench.startup_ms,
        rss_after_load_kib,
        results: &bench.results,
        subscriptions: &subscriptions,
        peer: &peer,
        mix_hit_rate,
    };
    let ratios = report.ratios();
    report.print_table();
    report.print_summary(&ratios);
    report.print_subscriptions();
    let json = report.json(ratios);
    std::fs::write(&bench.args.json, serde_json::to_string_pretty(&json)?)?;
    eprintln!("wrote {}", bench.args.json.display());
    if let Some(why) = peer_failure {
        bail!("the Node peer's page differs from votegraph's: {why}");
    }
    Ok(())
}

/// Starts Redis (unless `--redis-addr` names one), seeds it, and writes
/// the sessions of every user the scenarios log in as.
async fn prepare(
    args: Args,
) -> anyhow::Result<(Option<votegraph_store::redis_server::RedisServer>, Bench)> {
    let dir = tempfile::tempdir()?;
    let (redis, redis_addr) = match &args.redis_addr {
        Some(addr) => (None, addr.clone()),
        None => {
            let (server, addr) = servers::start_redis(&args.redis_server, dir.path()).await?;
            (Some(server), addr)
        }
    };
    let url = format!("redis://{redis_addr}");
    let client = redis::Client::open(votegraph_store::connection_info(&url)?)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let seeded = seed::seed(&mut conn, args.articles).await?;
    if seeded.open.is_empty() {
        bail!("no article is open to voting; seed more articles");
    }
    let (warmup, duration) = (
        Duration::from_secs_f64(args.warmup),
        Duration::from_secs_f64(args.duration),
    );
    // Users 0..3/4 vote in the load scenarios, the rest while subscribers
    // listen: a repeated vote is a no-op and would publish nothing.
    let load_users = (args.users * 3 / 4).max(1);
    let votes_per_run = (args.vote_rate * args.duration).ceil() as usize + 1;
    let busy = busy_users(&args, load_users, votes_per_run, warmup, duration);
    let readers_needed = if args.wants(busy::NAME) {
        busy.readers
    } else {
        0
    };
    seed::sessions(&mut conn, 0..args.users.max(readers_needed)).await?;
    if args.wants(busy::NAME) {
        seed::sessions(&mut conn, busy.first_voter..busy.first_voter + busy.voters).await?;
    }
    let bin = votegraph_bin(&args)?;
    let bench = Bench {
        n: args.connections,
        args,
        bin,
        warmup,
        duration,
        redis_addr,
        conn,
        open: Arc::new(seeded.open),
        load_users,
        next_user: Arc::new(AtomicUsize::new(0)),
        votes_per_run,
        busy,
        results: Vec::new(),
        startup_ms: 0.0,
        dir,
    };
    Ok((redis, bench))
}

/// `--votegraph`, or the votegraph binary next to this one.
fn votegraph_bin(args: &Args) -> anyhow::Result<PathBuf> {
    match &args.votegraph {
        Some(p) => Ok(p.clone()),
        None => Ok(std::env::current_exe()?.with_file_name("votegraph")),
    }
}

/// The busy scenario reads as the load users, but as at least
/// MIN_READERS of them: when `--users` gives fewer, the missing readers'
/// sessions are added (reading them changes nothing the others use). Its
/// voters come after every other user, the subscription runs' voters
/// included (who may go past `--users`), so each of its votes is a fresh
/// user's and moves a score, and no later vote is a no-op for having been
/// cast by it.
fn busy_users(
    args: &Args,
    load_users: usize,
    votes_per_run: usize,
    warmup: Duration,
    duration: Duration,
) -> BusyUsers {
    let readers = load_users.max(busy::MIN_READERS);
    let readers_needed = if args.wants(busy::NAME) { readers } else { 0 };
    BusyUsers {
        readers,
        first_voter: (load_users + SUBSCRIPTION_RUNS.len() * votes_per_run)
            .max(args.users)
            .max(readers_needed),
        voters: busy::voters_needed(args.busy_votes, warmup, duration),
    }
}

/// Starts votegraph as shipped, once its start-up pass has derived its
/// indexes from the seeded book keys (see [`start_votegraph`]): measuring
/// meanwhile would count that work against the first scenarios.
async fn start_shipped(bench: &mut Bench) -> anyhow::Result<Votegraph> {
    load::install_probe(bench.conn.clone());
    let started = Instant::now();
    let server = start_votegraph(&bench.bin, &bench.redis_addr, Mode::Default).await?;
    load::probe_server(Some(server.proc.id()));
    eprintln!(
        "votegraph started in {:.0} ms, derived its indexes in {:.1} s; {} connections, {:.0} s per scenario",
        server.startup_ms,
        started.elapsed().as_secs_f64() - server.startup_ms / 1000.0,
        bench.n,
        bench.args.duration
    );
    bench.startup_ms = server.startup_ms;
    Ok(server)
}
