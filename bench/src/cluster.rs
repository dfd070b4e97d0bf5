//! `--cluster`: votegraph on one Redis primary and on a 3-primary Redis
//! Cluster without replicas, in one run, both seeded the same way through
//! the API (the cluster's keyspace is not the book's, so the pipelined
//! seed does not apply): the front pages, votes, the Redis CPU each
//! primary spends per vote, and where the articles landed.

use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use serde::Serialize;
use serde_json::{json, Value};

use crate::load::{page_query, Gql, Stats};
use crate::scenarios::{
    fixed, logged_in, votes, Users, FRONT_PAGE, FRONT_PAGE_UNCACHED, LOGGED_IN, VOTE,
};
use crate::servers::{start_redis, start_redis_cluster, start_votegraph_on, Mode, RedisAt};
use crate::Args;

/// Users signed up per target: the readers and voters, who also post the
/// articles in turn, so the karma a vote moves is spread over their shards.
const USERS: usize = 20_000;
/// Requests in flight while seeding.
const SEEDING: usize = 32;
const PRIMARIES: usize = 3;

/// Votes per second of the stream both targets' CPU per vote is measured
/// on: the same stream for both, below what either sustains on a small
/// machine, so neither's figure is its cores' contention.
const PACED_VOTES_PER_SEC: f64 = 2_000.0;

/// What the cluster should reach against one primary.
const MAX_CPU_PER_VOTE_RATIO: f64 = 0.4;
const ARTICLE_SHARE: (f64, f64) = (0.20, 0.45);
const MIN_PAGE_RATIO: f64 = 0.7;

/// One Redis node's CPU seconds and EVALSHA calls so far.
async fn node_counters(addr: &str) -> anyhow::Result<(f64, u64)> {
    let mut conn = connect(addr).await?;
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .arg("commandstats")
        .query_async(&mut conn)
        .await?;
    let field = |name: &str| -> Option<&str> {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
    };
    let cpu = ["used_cpu_sys", "used_cpu_user"]
        .iter()
        .filter_map(|f| field(f)?.trim().parse::<f64>().ok())
        .sum();
    let scripts = field("cmdstat_evalsha")
        .and_then(|s| s.split(',').next()?.strip_prefix("calls=")?.parse().ok())
        .unwrap_or(0);
    Ok((cpu, scripts))
}

async fn connect(addr: &str) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://{addr}"))?;
    Ok(client.get_multiplexed_async_connection().await?)
}

async fn all_counters(nodes: &[String]) -> anyhow::Result<Vec<(f64, u64)>> {
    let mut out = Vec::new();
    for node in nodes {
        out.push(node_counters(node).await?);
    }
    Ok(out)
}

/// One GraphQL call's `data`; its errors are the seeding's failure.
async fn call(
    client: &reqwest::Client,
    base: &str,
    query: &str,
    variables: Value,
    token: Option<&str>,
) -> anyhow::Result<Value> {
    let mut request = client
        .post(format!("{base}/graphql"))
        .json(&json!({ "query": query, "variables": variables }));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let mut body: Value = request.send().await?.json().await?;
    if let Some(errors) = body.get("errors") {
        bail!("{query}: {errors}");
    }
    Ok(body["data"].take())
}

/// What seeding one target made, and how long it took.
#[derive(Serialize)]
struct Seeded {
    #[serde(skip)]
    tokens: Vec<String>,
    #[serde(skip)]
    ids: Vec<u64>,
    sign_up_s: f64,
    post_s: f64,
}

/// Signs up USERS users, then posts `articles` (user `a % USERS` posts
/// article `a`), SEEDING requests at a time.
async fn seed(base: &str, articles: usize) -> anyhow::Result<Seeded> {
    let client = reqwest::Client::new();
    let started = Instant::now();
    const SIGN_UP: &str =
        "mutation($n: String!) { signUp(name: $n, password: \"bench-password\") { token } }";
    let tokens: Vec<String> = stream::iter(0..USERS)
        .map(|u| {
            let client = &client;
            async move {
                let data = call(
                    client,
                    base,
                    SIGN_UP,
                    json!({ "n": format!("user{u}") }),
                    None,
                );
                let token = data.await?["signUp"]["token"].as_str().map(str::to_owned);
                token.context("signUp answered no token")
            }
        })
        .buffered(SEEDING)
        .try_collect()
        .await?;
    let sign_up_s = started.elapsed().as_secs_f64();
    const POST: &str = "mutation($t: String!, $l: String!) { post(title: $t, link: $l) { id } }";
    let ids: Vec<u64> = stream::iter(0..articles)
        .map(|a| {
            let (client, token) = (&client, &tokens[a % USERS]);
            let vars =
                json!({ "t": format!("Story {a}"), "l": format!("https://example.com/{a}") });
            async move {
                let data = call(client, base, POST, vars, Some(token)).await?;
                let id = data["post"]["id"]
                    .as_str()
                    .and_then(|id| id.parse::<u64>().ok());
                id.context("post answered no id")
            }
        })
        .buffer_unordered(SEEDING)
        .try_collect()
        .await?;
    Ok(Seeded {
        tokens,
        ids,
        sign_up_s,
        post_s: started.elapsed().as_secs_f64() - sign_up_s,
    })
}

/// One primary's part of the vote scenario's Redis work.
#[derive(Serialize)]
struct PrimaryCost {
    addr: String,
    cpu_s_per_1000_votes: f64,
    /// Its share of the EVALSHA calls of all primaries.
    evalsha_share: f64,
    /// Its EVALSHA calls per vote: a vote may run scripts on several shards.
    evalsha_per_vote: f64,
}

/// What one target measured.
#[derive(Serialize)]
struct Target {
    name: &'static str,
    seeding: Seeded,
    scenarios: Vec<Stats>,
    /// Each primary's cost of the paced vote stream.
    primaries: Vec<PrimaryCost>,
    /// And of the votes at full speed.
    primaries_saturated: Vec<PrimaryCost>,
    /// Each primary's share of the article hashes (the cluster only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    article_shares: Vec<f64>,
}

impl Target {
    fn rps(&self, scenario: &str) -> f64 {
        let found = self.scenarios.iter().find(|s| s.scenario == scenario);
        found.map_or(0.0, |s| s.rps)
    }

    fn cpu_per_vote(&self) -> f64 {
        busiest(&self.primaries)
    }
}

fn busiest(primaries: &[PrimaryCost]) -> f64 {
    let per_1000 = primaries.iter().map(|p| p.cpu_s_per_1000_votes);
    per_1000.fold(0.0, f64::max)
}

/// Votes at `PACED_VOTES_PER_SEC` for `duration`, each by the next user
/// on a random open article; answers the votes sent.
async fn paced_votes(gql: &Gql, open: &[u64], users: &Users, duration: Duration) -> u64 {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / PACED_VOTES_PER_SEC));
    let (started, mut sent) = (Instant::now(), Vec::new());
    let mut rng = crate::seed::Rng::new(11);
    while started.elapsed() < duration {
        tick.tick().await;
        let id = open[(rng.next_u64() % open.len() as u64) as usize];
        let (gql, token) = (gql.clone(), users.token(sent.len()));
        sent.push(tokio::spawn(async move {
            gql.post(crate::load::vote_query(id), Some(&token)).await
        }));
    }
    let n = sent.len() as u64;
    for vote in sent {
        let _ = vote.await;
    }
    n
}

/// Seeds a target through the API, then measures it: the shipped server
/// first, then one without the response cache.
async fn measure(
    args: &Args,
    bin: &PathBuf,
    name: &'static str,
    redis: RedisAt<'_>,
    primaries: &[String],
) -> anyhow::Result<Target> {
    eprintln!("{name}:");
    let server = start_votegraph_on(bin, redis, Mode::Default).await?;
    let seeding = seed(&server.base, args.articles as usize).await?;
    eprintln!(
        "  seeded {USERS} users in {:.1} s and {} articles in {:.1} s through the API",
        seeding.sign_up_s, args.articles, seeding.post_s
    );
    let (n, warmup, duration) = (
        args.connections,
        Duration::from_secs_f64(args.warmup),
        Duration::from_secs_f64(args.duration),
    );
    let gql = Gql::new(&server.base, n);
    let users = Users::Tokens(Arc::new(seeding.tokens.clone()));
    let mut scenarios = vec![
        fixed(&gql, FRONT_PAGE, page_query(1), n, warmup, duration).await,
        logged_in(&gql, LOGGED_IN, users.clone(), n, warmup, duration).await,
    ];
    // Every article was just posted: all are open to voting.
    let open = Arc::new(seeding.ids.clone());
    let before = all_counters(primaries).await?;
    let next = Arc::new(AtomicUsize::new(0));
    let vote = votes(&gql, open.clone(), users.clone(), next, n, warmup, duration).await;
    let after = all_counters(primaries).await?;
    let primaries_saturated = costs(primaries, &before, &after, vote.sent);
    scenarios.push(vote);
    let before = all_counters(primaries).await?;
    let sent = paced_votes(&gql, &open, &users, duration).await;
    let after = all_counters(primaries).await?;
    let primaries = costs(primaries, &before, &after, sent);
    drop(server);
    // One server at a time: an idle second one would still take CPU from
    // the one measured.
    let uncached = start_votegraph_on(bin, redis, Mode::Uncached).await?;
    let gql = Gql::new(&uncached.base, n);
    let body = page_query(1);
    scenarios.push(fixed(&gql, FRONT_PAGE_UNCACHED, body, n, warmup, duration).await);
    Ok(Target {
        name,
        seeding,
        scenarios,
        primaries,
        primaries_saturated,
        article_shares: Vec::new(),
    })
}

/// Each primary's CPU per 1,000 of the `votes` sent between `before` and
/// `after` (warm-up included, as the counters are), and its EVALSHA share.
fn costs(
    nodes: &[String],
    before: &[(f64, u64)],
    after: &[(f64, u64)],
    votes: u64,
) -> Vec<PrimaryCost> {
    let deltas: Vec<(f64, u64)> = after
        .iter()
        .zip(before)
        .map(|(a, b)| (a.0 - b.0, a.1.saturating_sub(b.1)))
        .collect();
    let scripts: u64 = deltas.iter().map(|d| d.1).sum();
    nodes
        .iter()
        .zip(deltas)
        .map(|(addr, (cpu, calls))| PrimaryCost {
            addr: addr.clone(),
            cpu_s_per_1000_votes: cpu * 1000.0 / votes.max(1) as f64,
            evalsha_share: calls as f64 / scripts.max(1) as f64,
            evalsha_per_vote: calls as f64 / votes.max(1) as f64,
        })
        .collect()
}

/// Article hashes (`…article:<id>`) on one node, found with SCAN.
async fn article_hashes(addr: &str) -> anyhow::Result<u64> {
    let mut conn = connect(addr).await?;
    let (mut cursor, mut count) = (0u64, 0u64);
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("*article:*")
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        count += keys
            .iter()
            .filter(|k| {
                let id = k.rsplit_once("article:").map_or("", |(_, id)| id);
                !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())
            })
            .count() as u64;
        if next == 0 {
            return Ok(count);
        }
        cursor = next;
    }
}

/// The `--cluster` run: one primary, then three, then the comparison.
pub async fn run(args: &Args, bin: PathBuf) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (redis, addr) = start_redis(&args.redis_server, dir.path()).await?;
    let one = [addr];
    let single = measure(args, &bin, "1 primary", RedisAt::Primary(&one[0]), &one).await?;
    drop(redis);
    let cluster = start_redis_cluster(dir.path(), PRIMARIES).await?;
    let seeds = RedisAt::Cluster(&cluster.seeds);
    let nodes = &cluster.primaries;
    let mut three = measure(args, &bin, "3 primaries", seeds, nodes).await?;
    let mut counts = Vec::new();
    for node in nodes {
        counts.push(article_hashes(node).await? as f64);
    }
    let total: f64 = counts.iter().sum();
    three.article_shares = counts.iter().map(|c| c / total.max(1.0)).collect();
    drop(cluster);
    print_table(&single, &three);
    let ratios = print_summary(&single, &three);
    let report = json!({
        "mode": "cluster",
        "articles": args.articles,
        "users": USERS,
        "connections": args.connections,
        "duration_s": args.duration,
        "cpus": crate::report::cpus(),
        "cluster": { "targets": [single, three], "ratios": ratios },
    });
    std::fs::write(&args.json, serde_json::to_string_pretty(&report)?)?;
    eprintln!("wrote {}", args.json.display());
    Ok(())
}

fn print_table(one: &Target, three: &Target) {
    println!(
        "\nvotegraph-bench --cluster: {} articles, {USERS} users, {} CPUs\n",
        one.seeding.ids.len(),
        crate::report::cpus()
    );
    println!("| scenario | 1 primary req/s | p50 ms | p99 ms | errors | 3 primaries req/s | p50 ms | p99 ms | errors | 3 ÷ 1 req/s |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (a, b) in one.scenarios.iter().zip(&three.scenarios) {
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {} | {:.0} | {:.2} | {:.2} | {} | {:.2} |",
            a.scenario,
            a.rps,
            a.p50_ms,
            a.p99_ms,
            a.errors,
            b.rps,
            b.p50_ms,
            b.p99_ms,
            b.errors,
            b.rps / a.rps.max(1e-9)
        );
    }
}

/// Prints the seeding, the CPU per vote and the targets; answers the ratios.
fn print_summary(one: &Target, three: &Target) -> Value {
    println!();
    for t in [one, three] {
        let s = &t.seeding;
        let per: Vec<String> = t
            .primaries
            .iter()
            .map(|p| {
                let (share, calls) = (p.evalsha_share * 100.0, p.evalsha_per_vote);
                let cpu = p.cpu_s_per_1000_votes;
                format!(
                    "{} {cpu:.3} s ({share:.0} % of EVALSHA, {calls:.2} per vote)",
                    p.addr
                )
            })
            .collect();
        println!(
            "{}: seeded in {:.1} s (sign-ups {:.1} s, posts {:.1} s); Redis CPU per 1,000 paced votes: {}",
            t.name,
            s.sign_up_s + s.post_s,
            s.sign_up_s,
            s.post_s,
            per.join(", ")
        );
    }
    let ratio = |name: &str| three.rps(name) / one.rps(name).max(1e-9);
    let pages = [FRONT_PAGE, FRONT_PAGE_UNCACHED, LOGGED_IN].map(|p| (p, ratio(p)));
    let cpu = three.cpu_per_vote() / one.cpu_per_vote().max(1e-12);
    let saturated =
        busiest(&three.primaries_saturated) / busiest(&one.primaries_saturated).max(1e-12);
    let shares = &three.article_shares;
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let shares_ok = shares
        .iter()
        .all(|s| (ARTICLE_SHARE.0..=ARTICLE_SHARE.1).contains(s));
    let shown: Vec<String> = shares
        .iter()
        .map(|s| format!("{:.1} %", s * 100.0))
        .collect();
    println!(
        "busiest primary's Redis CPU per vote ÷ one primary's, {PACED_VOTES_PER_SEC} votes/s: {cpu:.2} (≤ {MAX_CPU_PER_VOTE_RATIO}: {}); at full speed: {saturated:.2}",
        met(cpu <= MAX_CPU_PER_VOTE_RATIO)
    );
    println!(
        "article hashes per primary: {} (each {:.0}–{:.0} %: {})",
        shown.join(", "),
        ARTICLE_SHARE.0 * 100.0,
        ARTICLE_SHARE.1 * 100.0,
        met(shares_ok)
    );
    for (page, r) in pages {
        println!(
            "{page}: 3 primaries ÷ 1 primary {r:.2}× req/s (≥ {MIN_PAGE_RATIO}: {})",
            met(r >= MIN_PAGE_RATIO)
        );
    }
    json!({
        "front_page": pages[0].1,
        "front_page_uncached": pages[1].1,
        "front_page_logged_in": pages[2].1,
        "votes": ratio(VOTE),
        "busiest_primary_cpu_per_vote_vs_one_primary": cpu,
        "busiest_primary_cpu_per_vote_vs_one_primary_saturated": saturated,
    })
}
