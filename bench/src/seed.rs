//! Writes a realistic data set straight into Redis with pipelines, in the
//! same keyspace votegraph writes.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use sha2::{Digest, Sha256};
use votegraph_store::keys;

pub const GROUPS: usize = 20;
const WEEK: f64 = 7.0 * 86_400.0;

/// Small deterministic generator (xorshift64*), so runs are comparable.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

pub fn group_name(g: usize) -> String {
    format!("g{g:02}")
}

/// What the scenarios need to know about the seeded data.
pub struct Seeded {
    /// Ids of articles open to voting for at least another hour, so none
    /// closes while the benchmark runs.
    pub open: Vec<u64>,
}

/// Seeds `articles` articles posted over the last two weeks, with skewed
/// votes (most have one, a few thousands) and 20 groups of falling size
/// (group g holds `0.3 / (g + 1)` of the articles).
pub async fn seed(conn: &mut MultiplexedConnection, articles: u64) -> anyhow::Result<Seeded> {
    let started = Instant::now();
    let _: () = redis::cmd("FLUSHALL").query_async(conn).await?;
    let mut rng = Rng::new(42);
    let now = now();
    let mut open = Vec::new();
    let batch = 2_000u64;
    let mut id = 1u64;
    while id <= articles {
        let mut pipe = redis::pipe();
        for i in id..(id + batch).min(articles + 1) {
            let time = now - rng.unit() * 2.0 * WEEK;
            add_article(&mut pipe, &mut rng, i, time);
            if now - time < WEEK - 3_600.0 {
                open.push(i);
            }
            if now - time < WEEK {
                add_poster_vote(&mut pipe, i, time);
            }
        }
        let () = pipe.query_async(conn).await?;
        id += batch;
    }
    let _: () = redis::cmd("SET")
        .arg("article:")
        .arg(articles)
        .query_async(conn)
        .await?;
    eprintln!(
        "seeded {articles} articles ({} open to voting) in {:.1} s",
        open.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(Seeded { open })
}

fn poster(i: u64) -> String {
    format!("seed{}", i % 1_000)
}

/// Article `i`, posted at `time`: its hash, its places in `score:` and
/// `time:`, its slug and its groups.
fn add_article(pipe: &mut redis::Pipeline, rng: &mut Rng, i: u64, time: f64) {
    let votes = 1 + (5_000.0 * rng.unit().powi(12)) as i64;
    let article = format!("article:{i}");
    let slug = format!("seeded-article-{i}");
    pipe.cmd("HSET")
        .arg(&article)
        .arg("title")
        .arg(format!(
            "Seeded article {i}: notes on ranking things with sorted sets"
        ))
        .arg("link")
        .arg(format!("https://example.com/articles/{i}"))
        .arg("poster")
        .arg(format!("user:{}", poster(i)))
        .arg("time")
        .arg(format!("{time:.6}"))
        .arg("votes")
        .arg(votes)
        .arg("downvotes")
        .arg(0)
        .arg("slug")
        .arg(&slug)
        .ignore();
    let score = format!("{:.6}", time + 432.0 * votes as f64);
    pipe.cmd("ZADD")
        .arg("score:")
        .arg(&score)
        .arg(&article)
        .ignore();
    pipe.cmd("ZADD")
        .arg("time:")
        .arg(format!("{time:.6}"))
        .arg(&article)
        .ignore();
    pipe.cmd("HSET")
        .arg("slug.to.id")
        .arg(&slug)
        .arg(i)
        .ignore();
    add_groups(pipe, rng, &article);
}

/// The article's groups: both sets, and the sorted list the server keeps
/// in the hash beside them.
fn add_groups(pipe: &mut redis::Pipeline, rng: &mut Rng, article: &str) {
    let mut names = Vec::new();
    for g in 0..GROUPS {
        if rng.unit() < 0.3 / (g + 1) as f64 {
            let name = group_name(g);
            pipe.cmd("SADD")
                .arg(format!("group:{name}"))
                .arg(article)
                .ignore();
            pipe.cmd("SADD")
                .arg(format!("{article}:groups"))
                .arg(&name)
                .ignore();
            names.push(name);
        }
    }
    names.sort();
    pipe.cmd("HSET")
        .arg(article)
        .arg("groups")
        .arg(names.join(","))
        .ignore();
}

/// The poster's own vote on an article still open to voting, in `voted:`
/// and in the poster's vote index, as the post script writes them, so
/// logged-in pages read them as they would in production.
fn add_poster_vote(pipe: &mut redis::Pipeline, i: u64, time: f64) {
    pipe.cmd("SADD")
        .arg(format!("voted:{i}"))
        .arg(format!("user:{}", poster(i)))
        .ignore();
    pipe.cmd("EXPIREAT")
        .arg(format!("voted:{i}"))
        .arg((time + WEEK) as u64 + 1)
        .ignore();
    let index = keys::user_votes(&poster(i));
    pipe.cmd("ZADD")
        .arg(&index)
        .arg(format!("{time:.6}"))
        .arg(format!("article:{i}"))
        .ignore();
    pipe.cmd("EXPIRE").arg(&index).arg(WEEK as u64).ignore();
}

/// The login token of bench user `n`; its session is written by [`sessions`].
pub fn token(n: usize) -> String {
    format!("votegraph-bench-token-{n:08}")
}

/// Creates the logged-in users `users` directly (no password hashing
/// needed).
pub async fn sessions(
    conn: &mut MultiplexedConnection,
    users: std::ops::Range<usize>,
) -> anyhow::Result<()> {
    for chunk in users.collect::<Vec<_>>().chunks(5_000) {
        let mut pipe = redis::pipe();
        for &n in chunk {
            let hash = hex::encode(Sha256::digest(token(n).as_bytes()));
            pipe.cmd("SET")
                .arg(format!("session:{hash}"))
                .arg(format!("bench{n}"))
                .arg("EX")
                .arg(86_400)
                .ignore();
        }
        let () = pipe.query_async(conn).await?;
    }
    Ok(())
}
