//! The scenarios, in groups that share a server: what each sends, and on
//! which votegraph. [`Bench`] holds what they share: the seeded data, the
//! users, the settings and the results so far.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};

use crate::load::{
    self, article_query, feed_query, group_query, logged_in_page_query, page_query, raw_page,
    vote_query, Gql, Stats,
};
use crate::servers::{start_votegraph, CacheCounts, Mode, Votegraph};
use crate::{busy, http_limit, peer, proxy, seed, subscribers, Args};

pub const FRONT_PAGE: &str = "front page";
pub const FRONT_PAGE_UNCACHED: &str = "front page, uncached";
pub const GROUP_PAGE: &str = "group page, warm";
pub const GROUP_PAGE_UNCACHED: &str = "group page, warm, uncached";
pub const GROUP_PAGE_COLD: &str = "group page, cold, uncached";
pub const LOGGED_IN: &str = "front page, logged in";
pub const HOP: &str = "front page, 1 ms hop, uncached";
pub const HOP_1_BATCHED: &str = "front page, 1 ms hop, 1 client, uncached";
pub const RAW: &str = "raw Redis front page";
pub const RAW_LOGGED_IN: &str = "raw Redis front page, logged in";
pub const RAW_N_PLUS_1: &str = "raw Redis N+1";
pub const RAW_N_PLUS_1_LOGGED_IN: &str = "raw Redis N+1, logged in";
pub const RAW_HOP_N_PLUS_1: &str = "raw Redis N+1, 1 ms hop";
pub const RAW_HOP_1_BATCHED: &str = "raw Redis front page, 1 ms hop, 1 client";
pub const RAW_HOP_1_N_PLUS_1: &str = "raw Redis N+1, 1 ms hop, 1 client";
const COMPRESSED: &str = "front page (br)";
const LOGGED_IN_COMPRESSED: &str = "logged-in page (br)";
const ARTICLE: &str = "article by id";
pub const VOTE: &str = "vote (distinct users)";
const MIX: &str = "mix 90% read / 10% vote";
const MIX_LOGGED_IN: &str = "mix with logged-in readers, 90% read / 10% vote";
const TOP_WEEK: &str = "TOP_WEEK first page, uncached";
const DEEP_FEED: &str = "feed after a deep cursor (rank 50,000), uncached";

/// The subscription runs (name, document), each on a fresh server with
/// voters of its own.
pub const SUBSCRIPTION_RUNS: [(&str, &str); 2] = [
    ("subscribers", subscribers::SCORES),
    ("subscribers, article", subscribers::WITH_ARTICLE),
];

/// What the scenarios share.
pub struct Bench {
    pub args: Args,
    pub bin: PathBuf,
    pub warmup: Duration,
    pub duration: Duration,
    /// Concurrent clients.
    pub n: usize,
    pub redis_addr: String,
    pub conn: MultiplexedConnection,
    /// Articles open to voting.
    pub open: Arc<Vec<u64>>,
    /// Users 0..load_users read and vote in the load scenarios.
    pub load_users: usize,
    /// The next load user to vote or read, shared by the scenarios so a
    /// vote is rarely a repeat.
    pub next_user: Arc<AtomicUsize>,
    /// Votes one subscription run casts, each by a fresh user.
    pub votes_per_run: usize,
    pub busy: BusyUsers,
    pub results: Vec<Stats>,
    /// The shipped server's start-up, spawn to first healthy answer.
    pub startup_ms: f64,
    /// Where the run keeps its files.
    pub dir: tempfile::TempDir,
}

/// Who the busy scenario reads and votes as.
pub struct BusyUsers {
    pub readers: usize,
    pub first_voter: usize,
    pub voters: usize,
}

/// Runs a scenario that sends one fixed anonymous document.
pub async fn fixed(
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

/// Who the logged-in scenarios act as.
#[derive(Clone)]
pub enum Users {
    /// The first N users, whose sessions `seed::sessions` wrote.
    Seeded(usize),
    /// Users signed up through the API, by their tokens.
    Tokens(Arc<Vec<String>>),
}

impl Users {
    pub fn len(&self) -> usize {
        match self {
            Users::Seeded(n) => (*n).max(1),
            Users::Tokens(tokens) => tokens.len().max(1),
        }
    }

    /// The token of user `user` (taken modulo [`Users::len`]).
    pub fn token(&self, user: usize) -> String {
        match self {
            Users::Seeded(n) => seed::token(user % (*n).max(1)),
            Users::Tokens(tokens) => tokens[user % tokens.len()].clone(),
        }
    }
}

/// Runs the logged-in front page: distinct readers in turn, each with their
/// own `myVote` on every article, the same sequence of readers on any server.
pub async fn logged_in(
    gql: &Gql,
    name: &str,
    users: Users,
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
        let token = users.token(next.fetch_add(1, Ordering::Relaxed));
        async move { g.post(body.as_str().to_owned(), Some(&token)).await }
    })
    .await
}

/// Votes on the articles `open` to voting, each by the next user of
/// `next`, spread so that a user rarely votes on an article twice.
pub async fn votes(
    gql: &Gql,
    open: Arc<Vec<u64>>,
    users: Users,
    next: Arc<AtomicUsize>,
    n: usize,
    warmup: Duration,
    duration: Duration,
) -> Stats {
    let g = gql.clone();
    load::run(VOTE, n, warmup, duration, move |w, i| {
        let g = g.clone();
        let user = next.fetch_add(1, Ordering::Relaxed) % users.len();
        let id = open[((w as u64 * 31 + i * 7_727 + user as u64) % open.len() as u64) as usize];
        let token = users.token(user);
        async move { g.post(vote_query(id), Some(&token)).await }
    })
    .await
}

impl Bench {
    fn wants(&self, name: &str) -> bool {
        self.args.wants(name)
    }

    fn push(&mut self, stats: Stats) {
        self.results.push(stats);
    }

    /// [`fixed`] with this run's clients and times.
    pub async fn fixed_on(&self, gql: &Gql, name: &str, body: String) -> Stats {
        fixed(gql, name, body, self.n, self.warmup, self.duration).await
    }

    /// The anonymous front page as shipped: from the response cache.
    pub async fn front_page(&mut self, server: &Votegraph) {
        if self.wants(FRONT_PAGE) {
            let gql = Gql::new(&server.base, self.n);
            let stats = self.fixed_on(&gql, FRONT_PAGE, page_query(1)).await;
            self.push(stats);
        }
    }

    /// Other anonymous pages from the response cache.
    pub async fn cached_pages(&mut self, server: &Votegraph) {
        let gql = Gql::new(&server.base, self.n);
        for (name, body) in [
            ("deep page (400)", page_query(400)),
            (GROUP_PAGE, group_query("g00")),
        ] {
            if self.wants(name) {
                let stats = self.fixed_on(&gql, name, body).await;
                self.push(stats);
            }
        }
    }

    /// The front page's bytes from a minimal poem server: what HTTP alone
    /// costs, on the same connections as the cached front page.
    pub async fn http_limit(&mut self, server: &Votegraph) -> anyhow::Result<()> {
        if !self.wants(http_limit::NAME) {
            return Ok(());
        }
        let limit = http_limit::start(&server.base, self.dir.path()).await?;
        load::probe_server(Some(limit.proc.id()));
        let gql = Gql::new(&limit.base, self.n);
        let stats = self.fixed_on(&gql, http_limit::NAME, page_query(1)).await;
        self.push(stats);
        load::probe_server(Some(server.proc.id()));
        Ok(())
    }

    /// As a browser asks: compressed. A cached page keeps its compressed
    /// form; a logged-in page is compressed on every request.
    pub async fn compressed_pages(&mut self, server: &Votegraph) {
        let gql_br = Gql::accepting(&server.base, self.n, "gzip, deflate, br");
        if self.wants(COMPRESSED) {
            let stats = self.fixed_on(&gql_br, COMPRESSED, page_query(1)).await;
            self.push(stats);
        }
        if self.wants(LOGGED_IN_COMPRESSED) {
            let stats = self.logged_in_on(&gql_br, LOGGED_IN_COMPRESSED).await;
            self.push(stats);
        }
    }

    /// Logged-in readers in turn, from the shared users' sequence.
    async fn logged_in_on(&self, gql: &Gql, name: &str) -> Stats {
        let (g, users, load_users) = (gql.clone(), self.next_user.clone(), self.load_users);
        let body = Arc::new(logged_in_page_query());
        load::run(name, self.n, self.warmup, self.duration, move |_, _| {
            let (g, body) = (g.clone(), body.clone());
            let user = users.fetch_add(1, Ordering::Relaxed) % load_users;
            async move {
                g.post(body.as_str().to_owned(), Some(&seed::token(user)))
                    .await
            }
        })
        .await
    }

    /// The logged-in front page, each reader with their own votes.
    pub async fn logged_in_page(&mut self, server: &Votegraph) {
        if self.wants(LOGGED_IN) {
            let gql = Gql::new(&server.base, self.n);
            let stats = logged_in(
                &gql,
                LOGGED_IN,
                Users::Seeded(self.load_users),
                self.n,
                self.warmup,
                self.duration,
            )
            .await;
            self.push(stats);
        }
    }

    /// One article at a time, spread over the open ones.
    pub async fn article_by_id(&mut self, server: &Votegraph) {
        if !self.wants(ARTICLE) {
            return;
        }
        let (g, ids) = (Gql::new(&server.base, self.n), self.open.clone());
        let stats = load::run(ARTICLE, self.n, self.warmup, self.duration, move |w, i| {
            let g = g.clone();
            let id = ids[((w as u64 * 7919 + i * 104_729) % ids.len() as u64) as usize];
            async move { g.post(article_query(id), None).await }
        })
        .await;
        self.push(stats);
    }

    /// Votes, each by the next load user.
    pub async fn votes(&mut self, server: &Votegraph) {
        if !self.wants(VOTE) {
            return;
        }
        let stats = votes(
            &Gql::new(&server.base, self.n),
            self.open.clone(),
            Users::Seeded(self.load_users),
            self.next_user.clone(),
            self.n,
            self.warmup,
            self.duration,
        )
        .await;
        self.push(stats);
    }

    /// Nine reads to a vote: anonymous readers, then logged-in ones (whose
    /// shared templates the votes they may change drop, to be computed
    /// again). Answers the response cache's hit
    /// rate over the anonymous mix.
    pub async fn mixes(&mut self, server: &Votegraph) -> Option<f64> {
        let mut hit_rate = None;
        if self.wants(MIX) {
            let before = CacheCounts::of(&server.base).await;
            let stats = self.mix(server, MIX, false).await;
            self.push(stats);
            let cache = CacheCounts::of(&server.base).await.since(before);
            let (hits, misses) = (cache.hits, cache.misses);
            hit_rate = Some(hits as f64 / (hits + misses).max(1) as f64);
            eprintln!("  response cache during the mix: {hits} hits, {misses} misses");
        }
        if self.wants(MIX_LOGGED_IN) {
            let stats = self.mix(server, MIX_LOGGED_IN, true).await;
            self.push(stats);
        }
        hit_rate
    }

    async fn mix(&self, server: &Votegraph, name: &str, readers_logged_in: bool) -> Stats {
        let g = Gql::new(&server.base, self.n);
        let (ids, users, load_users) = (self.open.clone(), self.next_user.clone(), self.load_users);
        let page = Arc::new(if readers_logged_in {
            logged_in_page_query()
        } else {
            page_query(1)
        });
        load::run(name, self.n, self.warmup, self.duration, move |w, i| {
            let (g, page) = (g.clone(), page.clone());
            let vote = (w as u64 + i).is_multiple_of(10);
            let user = users.fetch_add(1, Ordering::Relaxed) % load_users;
            let id = ids[((w as u64 * 31 + i * 7_727) % ids.len() as u64) as usize];
            async move {
                let token = seed::token(user);
                if vote {
                    g.post(vote_query(id), Some(&token)).await
                } else {
                    let reader = readers_logged_in.then_some(token.as_str());
                    g.post(page.as_str().to_owned(), reader).await
                }
            }
        })
        .await
    }
}

impl Bench {
    /// Logged-in readers while a paced stream of votes lands on the page
    /// they read (see `busy.rs`). Only the page requests are timed; the
    /// cost columns include the votes' own Redis commands and server CPU,
    /// spread over the page requests, as that is what the busy page costs.
    pub async fn busy_page(&mut self, server: &Votegraph) -> anyhow::Result<()> {
        if !self.wants(busy::NAME) {
            return Ok(());
        }
        let gql = Gql::new(&server.base, self.n);
        let targets = busy::targets(&gql, &self.open).await?;
        let before = CacheCounts::of(&server.base).await;
        let stream = busy::start(
            Gql::new(&server.base, 16),
            targets,
            self.args.busy_votes,
            self.busy.first_voter,
            self.busy.voters,
            self.warmup,
            self.duration,
        );
        let readers = self.busy.readers;
        let mut stats = logged_in(
            &gql,
            busy::NAME,
            Users::Seeded(readers),
            self.n,
            self.warmup,
            self.duration,
        )
        .await;
        let mut votes = stream.stop(readers).await;
        let cache = CacheCounts::of(&server.base).await.since(before);
        votes.cache_hits = cache.hits;
        votes.cache_misses = cache.misses;
        votes.cache_evicted_by_votes = cache.evicted_by_votes;
        eprintln!(
            "  busy: {:.1} votes/s landed, {} errors ({} sent in {} s on {} front-page articles, {} readers; response cache {} hits, {} misses, {} entries dropped by votes)",
            votes.landed_per_s,
            votes.errors,
            votes.sent,
            self.args.duration,
            votes.articles.len(),
            votes.readers,
            votes.cache_hits,
            votes.cache_misses,
            votes.cache_evicted_by_votes,
        );
        // A refused vote is the scenario's error: the page was not as busy
        // as its name says.
        stats.errors += votes.errors;
        stats.vote_stream = Some(votes);
        self.push(stats);
        Ok(())
    }

    /// The Node peer on the same pages, checked against `server` first.
    /// Answers its report, and why its page differed, if it did.
    pub async fn node_peer(&mut self, server: &Votegraph) -> (Value, Option<String>) {
        let (logged_in, uncached) = (self.wants(peer::LOGGED_IN), self.wants(peer::UNCACHED));
        if self.args.no_peer || !(logged_in || uncached) {
            return (json!({ "status": "not run" }), None);
        }
        let run = peer::Run {
            node: &self.args.node,
            npm: &self.args.npm,
            redis_addr: &self.redis_addr,
            votegraph: &server.base,
            open: &self.open,
            users: self.load_users,
            logged_in,
            uncached,
            connections: self.n,
            warmup: self.warmup,
            duration: self.duration,
        };
        peer::measure(run, &mut self.results).await
    }

    /// Without the response cache: every request does its Redis work.
    pub async fn uncached_pages(&mut self) -> anyhow::Result<()> {
        let names = [
            FRONT_PAGE_UNCACHED,
            GROUP_PAGE_UNCACHED,
            GROUP_PAGE_COLD,
            TOP_WEEK,
            DEEP_FEED,
        ];
        if !names.iter().any(|name| self.wants(name)) {
            return Ok(());
        }
        let server = start_votegraph(&self.bin, &self.redis_addr, Mode::Uncached).await?;
        load::probe_server(Some(server.proc.id()));
        let gql = Gql::new(&server.base, self.n);
        for (name, body) in [
            (FRONT_PAGE_UNCACHED, page_query(1)),
            (GROUP_PAGE_UNCACHED, group_query("g00")),
        ] {
            if self.wants(name) {
                let stats = self.fixed_on(&gql, name, body).await;
                self.push(stats);
            }
        }
        if self.wants(GROUP_PAGE_COLD) {
            let stats = self.cold_group_page(&gql).await;
            self.push(stats);
        }
        if self.wants(TOP_WEEK) {
            let stats = self
                .fixed_on(&gql, TOP_WEEK, feed_query("TOP_WEEK", 25, None))
                .await;
            self.push(stats);
        }
        if self.wants(DEEP_FEED) {
            let stats = self.deep_feed(&gql).await;
            self.push(stats);
        }
        Ok(())
    }

    /// A group page whose cached ranking is dropped first (one of the five
    /// biggest groups'); that DEL is included in the time.
    async fn cold_group_page(&self, gql: &Gql) -> Stats {
        let (g, c) = (gql.clone(), self.conn.clone());
        load::run(
            GROUP_PAGE_COLD,
            self.n,
            self.warmup,
            self.duration,
            move |w, i| {
                let (g, mut c) = (g.clone(), c.clone());
                let group = seed::group_name(((w as u64 + i) % 5) as usize);
                async move {
                    let _: redis::RedisResult<()> = redis::cmd("DEL")
                        .arg(format!("score:{group}"))
                        .query_async(&mut c)
                        .await;
                    g.post(group_query(&group), None).await
                }
            },
        )
        .await
    }

    /// Scrolls 500 pages of 100 down the score feed, then reads the page
    /// after that cursor over and over.
    async fn deep_feed(&self, gql: &Gql) -> Stats {
        let mut cursor = None;
        for _ in 0..500 {
            match gql
                .end_cursor(feed_query("SCORE", 100, cursor.as_deref()))
                .await
            {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let body = feed_query("SCORE", 25, cursor.as_deref());
        self.fixed_on(gql, DEEP_FEED, body).await
    }

    /// The floor: the same Redis work as a front page, straight from here.
    pub async fn raw_redis_floors(&mut self) -> anyhow::Result<()> {
        load::probe_server(None);
        for (name, reader) in [(RAW, false), (RAW_LOGGED_IN, true)] {
            if self.wants(name) {
                let page = raw_page(&self.redis_addr, 8, false, reader, self.load_users).await?;
                let stats = load::run(name, self.n, self.warmup, self.duration, page).await;
                self.push(stats);
            }
        }
        Ok(())
    }

    /// The N+1 baselines (the same commands, one round trip at a time, from
    /// here), and votegraph batched, behind a simulated network hop to Redis.
    /// With one client, latency, not CPU, sets the pace, and the round
    /// trips batching saves show in full.
    pub async fn behind_a_hop(&mut self) -> anyhow::Result<()> {
        let hop = proxy::start(self.redis_addr.clone(), Duration::from_millis(1))?;
        let hop_addr = format!("127.0.0.1:{hop}");
        let (direct, n) = (self.redis_addr.clone(), self.n);
        load::probe_server(None);
        for (redis, name, clients, n_plus_1, reader) in [
            (&direct, RAW_N_PLUS_1, n, true, false),
            (&direct, RAW_N_PLUS_1_LOGGED_IN, n, true, true),
            (&hop_addr, RAW_HOP_N_PLUS_1, n, true, false),
            (&hop_addr, RAW_HOP_1_BATCHED, 1, false, false),
            (&hop_addr, RAW_HOP_1_N_PLUS_1, 1, true, false),
        ] {
            if self.wants(name) {
                let conns = clients.min(8);
                let page = raw_page(redis, conns, n_plus_1, reader, self.load_users).await?;
                let stats = load::run(name, clients, self.warmup, self.duration, page).await;
                self.push(stats);
            }
        }
        for (name, clients) in [(HOP, n), (HOP_1_BATCHED, 1)] {
            if !self.wants(name) {
                continue;
            }
            let server = start_votegraph(&self.bin, &hop_addr, Mode::Uncached).await?;
            load::probe_server(Some(server.proc.id()));
            let gql = Gql::new(&server.base, clients);
            let stats = fixed(
                &gql,
                name,
                page_query(1),
                clients,
                self.warmup,
                self.duration,
            )
            .await;
            self.push(stats);
        }
        Ok(())
    }

    /// Each subscription run on a fresh server, with voters of its own (a
    /// repeated vote publishes nothing).
    pub async fn subscriptions(&mut self) -> anyhow::Result<Vec<subscribers::SubStats>> {
        let mut runs = Vec::new();
        for (name, document) in SUBSCRIPTION_RUNS {
            if self.args.subscribers == 0 || !self.wants(name) {
                continue;
            }
            let server = start_votegraph(&self.bin, &self.redis_addr, Mode::Default).await?;
            eprintln!("{name}: {document}");
            let stats = subscribers::run(subscribers::Run {
                base: &server.base,
                pid: server.proc.id(),
                document,
                subscribers: self.args.subscribers,
                vote_rate: self.args.vote_rate,
                duration: self.duration,
                open: &self.open,
                first_user: self.load_users + runs.len() * self.votes_per_run,
            })
            .await?;
            runs.push(stats);
        }
        Ok(runs)
    }
}
