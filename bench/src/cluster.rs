//! `--cluster`: votegraph on one Redis primary and on a 3-primary Redis
//! Cluster, in one run, each seeded the same way through the API (a
//! cluster's keyspace is not the book's, so the pipelined seed does not
//! apply): the front pages, votes, and the Redis CPU each primary spends
//! per vote.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

use crate::load::{self, page_query, Gql, Stats};
use crate::redis_cluster::RedisCluster;
use crate::servers::{free_port, start_redis, wait_healthy, Proc};
use crate::Args;

/// Readers and voters signed up, and articles posted, per target.
const USERS: usize = 2_000;
const POSTERS: usize = 50;

/// Where a target's Redis is, as votegraph's flags name it.
enum Redis {
    Url(String),
    Cluster(String),
}

/// One Redis node's CPU seconds and vote scripts run so far.
async fn node_counters(addr: &str) -> anyhow::Result<(f64, u64)> {
    let client = redis::Client::open(format!("redis://{addr}"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("all").query_async(&mut conn).await?;
    let field = |name: &str| -> Option<&str> {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
    };
    let cpu = ["used_cpu_sys", "used_cpu_user"]
        .iter()
        .filter_map(|f| field(f)?.parse::<f64>().ok())
        .sum();
    let scripts = field("cmdstat_evalsha")
        .and_then(|s| s.split(',').next()?.strip_prefix("calls=")?.parse().ok())
        .unwrap_or(0);
    Ok((cpu, scripts))
}

/// A votegraph on `redis`, healthy; `cache` off for the uncached pages.
async fn serve(bin: &Path, redis: &Redis, cache: bool) -> anyhow::Result<(Proc, String)> {
    let port = free_port()?;
    let mut command = Command::new(bin);
    command.args(["--bind", &format!("127.0.0.1:{port}")]);
    match redis {
        Redis::Url(addr) => command.env("REDIS_URL", format!("redis://{addr}")),
        Redis::Cluster(seeds) => command.env("REDIS_CLUSTER_NODES", seeds),
    };
    for limit in ["VOTE", "POST", "SIGN_UP", "LOG_IN"] {
        command.env(format!("VOTEGRAPH_RATE_{limit}"), "1000000000/60");
    }
    command
        .env("VOTEGRAPH_ARGON2_MEMORY_KIB", "1024")
        .env("VOTEGRAPH_ARGON2_ITERATIONS", "1")
        .env("VOTEGRAPH_MAX_CONNECTIONS_PER_CLIENT", "1000000")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    if !cache {
        command.arg("--no-response-cache");
    }
    let proc = Proc(command.spawn().context("starting votegraph")?);
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&format!("{base}/health"), "votegraph").await?;
    Ok((proc, base))
}

/// Signs up USERS users and posts `articles` through the API, 32 at a
/// time; answers the users' tokens and the articles' ids.
async fn seed(base: &str, articles: usize) -> anyhow::Result<(Vec<String>, Vec<u64>)> {
    let client = reqwest::Client::new();
    let call = |query: &'static str, vars: Value, token: Option<String>| {
        let client = client.clone();
        async move {
            let mut request = client
                .post(format!("{base}/graphql"))
                .json(&json!({ "query": query, "variables": vars }));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let body: Value = request.send().await?.json().await?;
            anyhow::Ok(body)
        }
    };
    const SIGN_UP: &str =
        "mutation($n: String!) { signUp(name: $n, password: \"password\") { token } }";
    let tokens: Vec<String> = stream::iter(0..USERS)
        .map(|u| call(SIGN_UP, json!({ "n": format!("user{u}") }), None))
        .buffered(32)
        .map(|body| {
            Ok(body?["data"]["signUp"]["token"]
                .as_str()
                .context("a token")?
                .to_owned())
        })
        .collect::<Vec<anyhow::Result<String>>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    const POST: &str = "mutation($t: String!, $l: String!) { post(title: $t, link: $l) { id } }";
    let ids = stream::iter(0..articles)
        .map(|a| {
            let vars =
                json!({ "t": format!("Story {a}"), "l": format!("https://example.com/{a}") });
            call(POST, vars, Some(tokens[a % POSTERS].clone()))
        })
        .buffer_unordered(32)
        .map(|body| {
            body?["data"]["post"]["id"]
                .as_str()
                .context("an id")?
                .parse::<u64>()
                .context("id")
        })
        .collect::<Vec<anyhow::Result<u64>>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    Ok((tokens, ids))
}

/// What one target measured.
struct Measured {
    name: &'static str,
    seed_s: f64,
    stats: Vec<Stats>,
    /// Per primary: CPU ms per 1,000 votes, and its share of vote scripts.
    primaries: Vec<(f64, f64)>,
}

/// Seeds the target and runs its scenarios.
async fn measure(
    args: &Args,
    bin: &Path,
    name: &'static str,
    redis: Redis,
    nodes: &[String],
) -> anyhow::Result<Measured> {
    let (cached, base) = serve(bin, &redis, true).await?;
    let seeded = Instant::now();
    let (tokens, ids) = seed(&base, (args.articles as usize).min(20_000)).await?;
    let seed_s = seeded.elapsed().as_secs_f64();
    let (uncached, raw) = serve(bin, &redis, false).await?;
    let (n, warmup, duration) = (
        args.connections,
        Duration::from_secs_f64(args.warmup),
        Duration::from_secs_f64(args.duration),
    );
    let mut stats = Vec::new();
    let pages = [("front page", &base), ("front page, uncached", &raw)];
    for (scenario, at) in pages {
        load::probe_server(Some(if at == &base {
            cached.id()
        } else {
            uncached.id()
        }));
        let gql = Gql::new(at, n);
        let body = page_query(1);
        let op = move |_, _| {
            let (gql, body) = (gql.clone(), body.clone());
            async move { gql.post(body, None).await }
        };
        stats.push(load::run(scenario, n, warmup, duration, op).await);
    }
    load::probe_server(Some(uncached.id()));
    let tokens = Arc::new(tokens);
    let (gql, next) = (Gql::new(&raw, n), Arc::new(AtomicUsize::new(0)));
    let (t, body) = (tokens.clone(), load::logged_in_page_query());
    let op = move |_, _| {
        let (gql, body, t) = (gql.clone(), body.clone(), t.clone());
        let user = next.fetch_add(1, Ordering::Relaxed) % t.len();
        async move { gql.post(body, Some(&t[user])).await }
    };
    stats.push(load::run("front page, logged in", n, warmup, duration, op).await);
    let before = counters(nodes).await?;
    let (gql, next, ids) = (
        Gql::new(&raw, n),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(ids),
    );
    let op = move |_, _| {
        let (gql, t, ids) = (gql.clone(), tokens.clone(), ids.clone());
        // Distinct (voter, article) pairs: every vote moves a score.
        let k = next.fetch_add(1, Ordering::Relaxed);
        async move {
            let vote = load::vote_query(ids[k % ids.len()]);
            gql.post(vote, Some(&t[(k / ids.len()) % t.len()])).await
        }
    };
    let votes = load::run("vote (distinct users)", n, warmup, duration, op).await;
    let after = counters(nodes).await?;
    let scripts: u64 = after.iter().zip(&before).map(|(a, b)| a.1 - b.1).sum();
    let primaries = after
        .iter()
        .zip(&before)
        .map(|(a, b)| {
            let per_vote = (a.0 - b.0) * 1e6 / votes.sent.max(1) as f64;
            (per_vote, (a.1 - b.1) as f64 / scripts.max(1) as f64)
        })
        .collect();
    stats.push(votes);
    Ok(Measured {
        name,
        seed_s,
        stats,
        primaries,
    })
}

async fn counters(nodes: &[String]) -> anyhow::Result<Vec<(f64, u64)>> {
    let mut out = Vec::new();
    for node in nodes {
        out.push(node_counters(node).await?);
    }
    Ok(out)
}

/// The share of article hashes each primary holds.
async fn article_shares(nodes: &[String]) -> anyhow::Result<Vec<f64>> {
    let mut counts = Vec::new();
    for node in nodes {
        let client = redis::Client::open(format!("redis://{node}"))?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*article:*")
            .query_async(&mut conn)
            .await?;
        let hashes = keys.iter().filter(|k| {
            let id = k.rsplit_once("article:").map_or("", |(_, id)| id);
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())
        });
        counts.push(hashes.count() as f64);
    }
    let total: f64 = counts.iter().sum();
    Ok(counts.iter().map(|c| c / total.max(1.0)).collect())
}

/// The `--cluster` run: one primary, then three, then the comparison.
pub async fn run(args: &Args, bin: PathBuf) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (redis, addr) = start_redis(&args.redis_server, dir.path()).await?;
    let one = measure(args, &bin, "1 primary", Redis::Url(addr.clone()), &[addr]).await?;
    drop(redis);
    let cluster = RedisCluster::start(dir.path(), 3, 0).await?;
    let nodes: Vec<String> = cluster
        .primaries()
        .await
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let three = measure(
        args,
        &bin,
        "3 primaries",
        Redis::Cluster(cluster.seeds()),
        &nodes,
    )
    .await?;
    let shares = article_shares(&nodes).await?;
    report(&one, &three, &shares);
    Ok(())
}

fn report(one: &Measured, three: &Measured, shares: &[f64]) {
    println!("\n| scenario | 1 primary req/s | p99 ms | 3 primaries req/s | p99 ms | ratio |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (a, b) in one.stats.iter().zip(&three.stats) {
        println!(
            "| {} | {:.0} | {:.1} | {:.0} | {:.1} | {:.2} |",
            a.scenario,
            a.rps,
            a.p99_ms,
            b.rps,
            b.p99_ms,
            b.rps / a.rps.max(1.0)
        );
    }
    for m in [one, three] {
        let per: Vec<String> = m
            .primaries
            .iter()
            .map(|(us, share)| format!("{us:.0} µs/vote ({:.0} % of scripts)", share * 100.0))
            .collect();
        println!(
            "{}: seeded in {:.1} s; Redis CPU per primary: {}",
            m.name,
            m.seed_s,
            per.join(", ")
        );
    }
    let single = one.primaries.first().map_or(1.0, |p| p.0);
    let busiest = three.primaries.iter().map(|p| p.0).fold(0.0, f64::max);
    let shares: Vec<String> = shares
        .iter()
        .map(|s| format!("{:.0} %", s * 100.0))
        .collect();
    println!(
        "busiest primary's Redis CPU per vote ÷ one primary's: {:.2}; article keys per primary: {}",
        busiest / single.max(1e-9),
        shares.join(", ")
    );
}
