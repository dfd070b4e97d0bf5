//! Cluster mode (`--redis-cluster-nodes`): the GraphQL contract on a
//! 3-primary, 3-replica Redis Cluster on loopback, with the keys spread
//! over the primaries and karma applied once across shards.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{
    done_if, eventually, gql_at, ids, needed, set_role_on_cluster, sign_up_at, spawn_server,
    test_settings_for, Binary, Instance, Program, TestCluster, WsClient, TRANSPORT_WS, VOTE_AS,
};
use crate::metrics::{metrics_text, parse, value};

/// The shards of a new cluster keyspace, by default.
const SHARDS: usize = 12;

/// A server binary's environment on the cluster of `seeds`, with `more`.
fn on_cluster<'a>(seeds: &'a str, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![("REDIS_CLUSTER_NODES", seeds)];
    env.extend_from_slice(more);
    env
}

/// A server binary in cluster mode on `cluster` that gives up on a silent
/// primary after 300 ms and lets posters post freely, with `more`; and
/// the site it serves.
async fn impatient(cluster: &TestCluster, more: &[(&str, &str)]) -> (Binary, Site) {
    let seeds = cluster.seeds();
    let mut env = on_cluster(
        &seeds,
        &[
            ("VOTEGRAPH_REDIS_TIMEOUT_MS", "300"),
            ("VOTEGRAPH_RATE_POST", "1000/60"),
        ],
    );
    env.extend_from_slice(more);
    let server = Binary::start("", &env).await;
    let site = Site::at(&server.address);
    (server, site)
}

/// A server in cluster mode on `cluster`, with the test settings.
async fn serve(cluster: &TestCluster) -> Instance {
    let mut settings = test_settings_for("redis://unused");
    settings.redis_url = None;
    settings.redis_cluster_nodes = Some(cluster.seeds());
    spawn_server(settings).await
}

struct Site {
    client: reqwest::Client,
    address: String,
}

impl Site {
    fn at(address: &str) -> Self {
        Self {
            client: reqwest::Client::new(),
            address: address.to_owned(),
        }
    }

    async fn gql(&self, query: &str, variables: Value, token: Option<&str>) -> Value {
        gql_at(&self.client, &self.address, query, variables, token, None).await
    }

    async fn ok(&self, query: &str, variables: Value, token: Option<&str>) -> Value {
        let body = self.gql(query, variables, token).await;
        assert!(body.get("errors").is_none(), "unexpected errors: {body}");
        body["data"].clone()
    }

    async fn post(&self, token: &str, title: &str) -> String {
        let data = self
            .ok(
                "mutation($t: String!, $l: String!) { post(title: $t, link: $l) { id } }",
                json!({ "t": title, "l": format!("https://example.com/{}", title.replace(' ', "-")) }),
                Some(token),
            )
            .await;
        data["post"]["id"].as_str().expect("id").to_owned()
    }

    async fn log_in(&self, name: &str) -> String {
        let query =
            "mutation($n: String!, $p: String!) { logIn(name: $n, password: $p) { token } }";
        let vars = json!({ "n": name, "p": format!("password-of-{}", name.to_lowercase()) });
        let data = self.ok(query, vars, None).await;
        data["logIn"]["token"].as_str().expect("token").to_owned()
    }

    /// Votes; the answer shows the vote cast.
    async fn vote(&self, token: &str, id: &str, direction: &str) {
        let query = "mutation($id: ID!, $d: VoteDirection!) { vote(articleId: $id, direction: $d) { myVote } }";
        let data = self
            .ok(query, json!({ "id": id, "d": direction }), Some(token))
            .await;
        assert_eq!(data["vote"]["myVote"], direction, "{data}");
    }

    /// The caller's vote on each article of the newest page.
    async fn my_votes(&self, token: &str) -> HashMap<String, String> {
        let page = self.front_page("NEWEST", Some(token)).await;
        let votes = page.as_array().unwrap().iter().map(|a| {
            let id = a["id"].as_str().unwrap().to_owned();
            (id, a["myVote"].as_str().unwrap().to_owned())
        });
        votes.collect()
    }

    async fn front_page(&self, order: &str, token: Option<&str>) -> Value {
        let query = "query($o: ArticleOrder!) { articles(order: $o, pageSize: 50) { id votes downvotes score myVote poster { name } } }";
        self.ok(query, json!({ "o": order }), token).await["articles"].clone()
    }

    /// Each poster's karma, as `topPosters` shows it.
    async fn karma(&self) -> HashMap<String, i64> {
        let data = self
            .ok(
                "{ topPosters(limit: 100) { user { name } karma } }",
                json!({}),
                None,
            )
            .await;
        data["topPosters"]
            .as_array()
            .expect("list")
            .iter()
            .map(|u| {
                let name = u["user"]["name"].as_str().unwrap().to_owned();
                (name, u["karma"].as_i64().unwrap())
            })
            .collect()
    }

    /// Each poster's net votes over their articles, from the front page.
    async fn net_votes(&self) -> HashMap<String, i64> {
        let mut net = HashMap::new();
        for a in self.front_page("NEWEST", None).await.as_array().unwrap() {
            let votes = a["votes"].as_i64().unwrap() - a["downvotes"].as_i64().unwrap();
            *net.entry(a["poster"]["name"].as_str().unwrap().to_owned())
                .or_default() += votes;
        }
        net
    }
}

#[tokio::test]
async fn a_cluster_serves_accounts_posts_votes_and_pages() {
    let cluster = TestCluster::start(3, 1).await;
    let server = serve(&cluster).await;
    let site = Site::at(&server.address);
    let alice = sign_up_at(&site.client, &site.address, "alice").await;
    let bob = sign_up_at(&site.client, &site.address, "bob").await;
    let carol = sign_up_at(&site.client, &site.address, "carol").await;

    // Posts land on several shards; each gets its id and slug.
    let mut posted = Vec::new();
    for title in ["one", "two", "three", "four", "five", "six"] {
        posted.push(site.post(&alice, title).await);
    }
    posted.push(site.post(&bob, "bobs").await);
    let newest = ids(&site.front_page("NEWEST", None).await);
    let mut expected = posted.clone();
    expected.reverse();
    assert_eq!(newest, expected, "newest first, over every shard");

    // Votes in every direction, switched and taken back.
    site.vote(&bob, &posted[2], "UP").await;
    site.vote(&carol, &posted[2], "UP").await;
    site.vote(&carol, &posted[4], "DOWN").await;
    site.vote(&bob, &posted[5], "UP").await;
    site.vote(&bob, &posted[5], "DOWN").await;
    site.vote(&carol, &posted[0], "UP").await;
    site.vote(&carol, &posted[0], "NONE").await;

    let page = site.front_page("SCORE", Some(&bob)).await;
    let scores: Vec<f64> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert_eq!(ids(&page)[0], posted[2], "two upvotes lead: {page}");
    // A voter's index is on their own shard: pages show their votes once
    // the votes answer.
    for (token, votes) in [
        (&bob, [(2, "UP"), (5, "DOWN"), (0, "NONE")]),
        (&carol, [(2, "UP"), (4, "DOWN"), (0, "NONE")]),
    ] {
        let mine = site.my_votes(token).await;
        let seen: Vec<&str> = votes
            .iter()
            .map(|&(p, _)| mine[&posted[p]].as_str())
            .collect();
        let cast: Vec<&str> = votes.iter().map(|&(_, d)| d).collect();
        assert_eq!(seen, cast);
    }

    // Karma follows the votes across shards: alice's six articles have six
    // own upvotes, two more on "three", one down on "five" and on "six".
    // It is applied right after the votes, not before they answer.
    let expected = HashMap::from([("alice".to_owned(), 6 + 2 - 2), ("bob".to_owned(), 1)]);
    eventually(
        "karma to follow the votes",
        Duration::from_secs(5),
        async || {
            let karma = site.karma().await;
            done_if(karma == expected, karma)
        },
    )
    .await;
    assert_eq!(site.karma().await, site.net_votes().await);

    // One title posted again gets another slug, each found again.
    let mut slugs = Vec::new();
    for _ in 0..3 {
        let query =
            "mutation { post(title: \"Same\", link: \"https://example.com/s\") { id slug } }";
        let posted = site.ok(query, json!({}), Some(&bob)).await["post"].clone();
        slugs.push((
            posted["id"].clone(),
            posted["slug"].as_str().unwrap().to_owned(),
        ));
    }
    assert_eq!(slugs[0].1, "same");
    for (id, slug) in &slugs {
        assert!(slug.starts_with("same"), "{slugs:?}");
        let found = site
            .ok(
                "query($s: String!) { articleBySlug(slug: $s) { id } }",
                json!({ "s": slug }),
                None,
            )
            .await;
        assert_eq!(&found["articleBySlug"]["id"], id, "{slugs:?}");
    }
    let count = site.ok("{ articleCount }", json!({}), None).await;
    assert_eq!(count["articleCount"], 10);

    // A session ends everywhere at logOut; logIn starts another.
    let out = site
        .ok("mutation { logOut }", json!({}), Some(&carol))
        .await;
    assert_eq!(out["logOut"], true);
    let body = site
        .gql(VOTE_AS, json!({ "id": posted[1], "d": "UP" }), Some(&carol))
        .await;
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "UNAUTHENTICATED",
        "{body}"
    );
    let carol = site.log_in("CAROL").await;
    site.vote(&carol, &posted[1], "UP").await;
    let taken = site
        .gql(
            "mutation { signUp(name: \"Alice\", password: \"password-of-x\") { token } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(
        taken["errors"][0]["extensions"]["code"], "BAD_USER_INPUT",
        "{taken}"
    );
}

#[tokio::test]
async fn events_reach_every_instance_and_feeds_neither_repeat_nor_skip() {
    let cluster = TestCluster::start(3, 0).await;
    let (a, b) = (serve(&cluster).await, serve(&cluster).await);
    let site = Site::at(&a.address);
    let mut listener = WsClient::connect_to(&b.address, TRANSPORT_WS, json!({})).await;
    listener
        .subscribe(
            "1",
            "subscription { scoreChanged { article { id } votes } }",
            json!({}),
        )
        .await;
    let mut posted = WsClient::connect_to(&b.address, TRANSPORT_WS, json!({})).await;
    posted
        .subscribe(
            "2",
            "subscription { articlePosted { id title } }",
            json!({}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (posts, voters) = seed(&site, 30, 3).await;
    let first = posted.next_event().await;
    assert_eq!(first["articlePosted"]["id"], posts[0], "{first}");
    site.vote(&voters[0], &posts[7], "UP").await;
    let event = listener.next_event().await;
    assert_eq!(event["scoreChanged"]["article"]["id"], posts[7], "{event}");

    // Paging the feed while the articles already read move up: every
    // article comes once.
    let query = "query($a: String) { feed(first: 4, after: $a) { edges { node { id } } pageInfo { hasNextPage endCursor } } }";
    let (mut seen, mut after, mut voted) = (Vec::<String>::new(), Value::Null, 0);
    loop {
        let data = site.ok(query, json!({ "a": after }), None).await["feed"].clone();
        for edge in data["edges"].as_array().unwrap() {
            seen.push(edge["node"]["id"].as_str().unwrap().to_owned());
        }
        if let Some(read) = seen.get(voted) {
            site.vote(&voters[1 + voted % 2], read, "UP").await;
            voted += 1;
        }
        if data["pageInfo"]["hasNextPage"] != true {
            break;
        }
        after = data["pageInfo"]["endCursor"].clone();
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "repeated: {seen:?}");
    assert_eq!(seen.len(), 30, "skipped: {seen:?}");
}

#[tokio::test]
async fn moderators_flag_remove_ban_and_log_across_shards() {
    let cluster = TestCluster::start(3, 0).await;
    let server = serve(&cluster).await;
    let site = Site::at(&server.address);
    sign_up_at(&site.client, &site.address, "root").await;
    let made = set_role_on_cluster(&cluster.seeds(), "root", "admin");
    assert!(made.status.success(), "{made:?}");
    let root = site.log_in("root").await;
    let (posts, flaggers) = seed(&site, 12, 2).await;
    let poster = site.log_in("poster").await;
    for (n, id) in posts.iter().enumerate().take(6) {
        let flag = "mutation($id: ID!) { flag(articleId: $id, reason: \"spam\") { id } }";
        site.ok(flag, json!({ "id": id }), Some(&flaggers[n % 2]))
            .await;
    }
    let queue = "{ moderationQueue(first: 50) { edges { node { id } } } }";
    let queued = site.ok(queue, json!({}), Some(&root)).await;
    let mut queued = ids(&queued["moderationQueue"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"].clone())
        .collect());
    queued.sort();
    let mut flagged: Vec<String> = posts[..6].to_vec();
    flagged.sort();
    assert_eq!(queued, flagged, "the queue merges every shard's flags");

    let remove =
        "mutation($id: ID!) { removeArticle(articleId: $id, reason: \"spam\") { id status } }";
    site.ok(remove, json!({ "id": posts[0] }), Some(&root))
        .await;
    assert!(!ids(&site.front_page("NEWEST", None).await).contains(&posts[0]));
    let ban =
        "mutation { banUser(name: \"poster\", reason: \"spam\", removeArticles: true) { name } }";
    site.ok(ban, json!({}), Some(&root)).await;
    assert_eq!(
        site.front_page("NEWEST", None)
            .await
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let body = site
        .gql(VOTE_AS, json!({ "id": posts[1], "d": "UP" }), Some(&poster))
        .await;
    assert_eq!(body["errors"][0]["extensions"]["code"], "BANNED", "{body}");

    let log = "{ modLog(first: 50) { totalCount edges { node { action } } } }";
    let log = site.ok(log, json!({}), Some(&root)).await["modLog"].clone();
    let actions: Vec<&str> = log["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["action"].as_str().unwrap())
        .collect();
    // Newest first: the ban's removals, the ban, the first removal, the role.
    assert_eq!(actions[11], "BAN_USER", "{actions:?}");
    assert_eq!(
        actions.iter().filter(|a| **a == "REMOVE_ARTICLE").count(),
        12,
        "{actions:?}"
    );
    assert_eq!(actions.last(), Some(&"SET_ROLE"), "{actions:?}");
    assert_eq!(log["totalCount"], actions.len());
}

/// A flag counts toward hiding by the karma its account has on its own
/// shard; a moderator's vote on the hidden article reaches its poster's
/// karma, through the outbox, only at the restore, which clears the flags
/// for good.
#[tokio::test]
async fn earned_flags_hide_and_held_karma_follows_the_restore_across_shards() {
    let cluster = TestCluster::start(3, 0).await;
    let mut settings = test_settings_for("redis://unused");
    settings.redis_url = None;
    settings.redis_cluster_nodes = Some(cluster.seeds());
    (settings.flag_threshold, settings.flag_min_account_age_secs) = (2, 0);
    settings.flag_min_karma = 1;
    let server = spawn_server(settings).await;
    let site = Site::at(&server.address);
    sign_up_at(&site.client, &site.address, "root").await;
    let made = set_role_on_cluster(&cluster.seeds(), "root", "admin");
    assert!(made.status.success(), "{made:?}");
    let root = site.log_in("root").await;
    let (posts, readers) = seed(&site, 1, 4).await;
    let id = posts[0].as_str();
    let flag = "mutation($id: ID!) { flag(articleId: $id) { id } }";
    let public = async || ids(&site.front_page("NEWEST", None).await).contains(&posts[0]);

    for reader in &readers[..2] {
        site.ok(flag, json!({ "id": id }), Some(reader)).await;
    }
    assert!(public().await, "accounts without karma do not hide");
    // A post is a point of karma, on the poster's shard.
    site.post(&readers[2], "veteran two").await;
    site.post(&readers[3], "veteran three").await;
    eventually("the veterans' karma", Duration::from_secs(5), async || {
        let karma = site.karma().await;
        let earned = ["reader2", "reader3"].map(|r| karma.get(r).copied());
        done_if(earned == [Some(1), Some(1)], karma)
    })
    .await;
    for reader in &readers[2..] {
        site.ok(flag, json!({ "id": id }), Some(reader)).await;
    }
    assert!(!public().await, "two flags that count hide it");

    site.vote(&root, id, "UP").await;
    // Past the outbox's drain and any cached page.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(site.karma().await["poster"], 1, "held while hidden");
    let restore = "mutation($id: ID!) { restoreArticle(articleId: $id) { id } }";
    site.ok(restore, json!({ "id": id }), Some(&root)).await;
    eventually("karma at the restore", Duration::from_secs(5), async || {
        let karma = site.karma().await["poster"];
        done_if(karma == 2, karma)
    })
    .await;
    for reader in &readers[2..] {
        site.ok(flag, json!({ "id": id }), Some(reader)).await;
    }
    assert!(public().await, "cleared flaggers do not hide it again");
}

/// A ban whose removals cannot all be written answers that it may be
/// partly done, and sent again once the shard is back, removes the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ban_that_cannot_remove_every_article_says_so() {
    let cluster = TestCluster::start(3, 0).await;
    let (_server, site) = impatient(&cluster, &[]).await;
    sign_up_at(&site.client, &site.address, "root").await;
    assert!(set_role_on_cluster(&cluster.seeds(), "root", "admin")
        .status
        .success());
    let root = site.log_in("root").await;
    let spammer = sign_up_at(&site.client, &site.address, "spammer").await;
    let mut posts = Vec::new();
    for n in 0..24 {
        posts.push(site.post(&spammer, &format!("spam {n}")).await);
    }
    // A primary with some of the articles but neither user's keys.
    let spared = [
        cluster.holder("user:root").await,
        cluster.holder("user:spammer").await,
    ];
    let mut elsewhere = Vec::new();
    for id in &posts {
        elsewhere.push(cluster.holder(&format!("article:{id}")).await);
    }
    let paused = *elsewhere.iter().find(|p| !spared.contains(p)).unwrap();
    pause_writes(&cluster, paused, 3_000).await;
    let ban =
        "mutation { banUser(name: \"spammer\", reason: \"spam\", removeArticles: true) { name } }";
    let body = site.gql(ban, json!({}), Some(&root)).await;
    // The removals that timed out may still run when the pause ends.
    assert_eq!(
        body["errors"][0]["extensions"]["code"], "OUTCOME_UNKNOWN",
        "{body}"
    );

    eventually(
        "the ban sent again to pass",
        Duration::from_secs(10),
        async || {
            let body = site.gql(ban, json!({}), Some(&root)).await;
            done_if(body.get("errors").is_none(), body)
        },
    )
    .await;
    assert_eq!(site.front_page("NEWEST", None).await, json!([]));
}

/// `/health` counts the shards whose primary answers: some silent is
/// `degraded`, still 200, and all silent is 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_counts_the_shards_that_answer() {
    let cluster = TestCluster::start(3, 0).await;
    let (_server, site) = impatient(&cluster, &[]).await;
    let health = async || {
        let url = format!("{}/health", site.address);
        let response = site.client.get(url).send().await.unwrap();
        let code = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        (code, body["status"].clone(), body["shards"].clone())
    };
    let shards = |answering: usize| json!({ "answering": answering, "of": SHARDS });
    assert_eq!(health().await, (200, json!("ok"), shards(SHARDS)));
    let primaries = cluster.primaries().await;
    pause(&cluster, primaries[0], 2_000, "ALL").await;
    let left = SHARDS - SHARDS / primaries.len();
    assert_eq!(health().await, (200, json!("degraded"), shards(left)));
    for &port in &primaries[1..] {
        pause(&cluster, port, 2_000, "ALL").await;
    }
    assert_eq!(health().await, (503, json!("unavailable"), shards(0)));
}

#[tokio::test]
async fn a_cluster_spreads_articles_and_votes_over_its_primaries() {
    let cluster = TestCluster::start(3, 1).await;
    let server = serve(&cluster).await;
    let site = Site::at(&server.address);
    let poster = sign_up_at(&site.client, &site.address, "poster").await;
    let voter = sign_up_at(&site.client, &site.address, "voter").await;
    let mut posted = Vec::new();
    for n in 0..60 {
        posted.push(site.post(&poster, &format!("article {n}")).await);
    }
    for id in &posted {
        site.vote(&voter, id, "UP").await;
    }
    let primaries = cluster.primaries().await;
    assert_eq!(primaries.len(), 3);
    let mut articles = Vec::new();
    for port in &primaries {
        let mut conn = node(&cluster, *port).await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*article:*")
            .query_async(&mut conn)
            .await
            .unwrap();
        let hashes = keys
            .iter()
            .filter_map(|k| k.split_once('}')?.1.strip_prefix("article:"))
            .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
            .count();
        articles.push(hashes);
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            stats.contains("cmdstat_evalsha"),
            "no script ran on {port}: {stats}"
        );
    }
    let total: usize = articles.iter().sum();
    assert_eq!(total, 60, "{articles:?}");
    for n in &articles {
        let share = *n as f64 / total as f64;
        assert!((0.2..=0.45).contains(&share), "{articles:?}");
    }
}

/// A primary that lost the page scripts (restarted, or a promoted
/// replica) is given them again: a page's reads of every shard go in one
/// pipeline per primary, and redis-rs loads no script for a pipeline.
#[tokio::test]
async fn pages_load_their_scripts_again_where_a_primary_lost_them() {
    let cluster = TestCluster::start(3, 0).await;
    let server = serve(&cluster).await;
    let site = Site::at(&server.address);
    let poster = sign_up_at(&site.client, &site.address, "poster").await;
    let post = "mutation($t: String!, $l: String!) { post(title: $t, link: $l, groups: [\"news\"]) { id } }";
    let mut posted = Vec::new();
    for n in 0..12 {
        let vars = json!({ "t": format!("story {n}"), "l": format!("https://example.com/{n}") });
        let data = site.ok(post, vars, Some(&poster)).await;
        posted.push(data["post"]["id"].as_str().unwrap().to_owned());
    }
    posted.reverse();
    let pages = async |size: usize| {
        let query = "query($n: Int!) { group(name: \"news\") { \
            articles(order: NEWEST, pageSize: $n) { id } \
            feed(order: NEWEST, first: $n) { edges { node { id } } } } }";
        let group = site.ok(query, json!({ "n": size }), None).await["group"].clone();
        let edges = group["feed"]["edges"].as_array().unwrap();
        let fed: Vec<String> = edges
            .iter()
            .map(|e| e["node"]["id"].as_str().unwrap().to_owned())
            .collect();
        (ids(&group["articles"]), fed)
    };
    let newest = |n: usize| (posted[..n].to_vec(), posted[..n].to_vec());
    assert_eq!(pages(5).await, newest(5));
    for port in cluster.primaries().await {
        let mut conn = node(&cluster, port).await;
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    assert_eq!(pages(6).await, newest(6));
}

/// Votes of `voters` on `posts`, in every direction, sent to each of
/// `addresses` in turn until one stops answering; answers the rounds made.
fn vote_until_killed(
    addresses: Vec<String>,
    voters: Vec<String>,
    posts: Vec<String>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let client = reqwest::Client::new();
        for round in 0.. {
            for (v, token) in voters.iter().enumerate() {
                let id = &posts[(v + round) % posts.len()];
                let direction = ["UP", "DOWN", "NONE"][(v * 7 + round) % 3];
                let vars = json!({ "id": id, "d": direction });
                let address = &addresses[v % addresses.len()];
                let request = client
                    .post(format!("{address}/graphql"))
                    .bearer_auth(token)
                    .json(&json!({ "query": VOTE_AS, "variables": vars }));
                if request.send().await.is_err() {
                    return round;
                }
            }
        }
        unreachable!()
    })
}

/// Karma and vote indexes live on their users' shards, the vote on the
/// article's: a server killed between the two leaves the changes in the
/// article shard's outbox for the others, and two servers draining the
/// same outboxes at once apply each change once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karma_survives_a_server_killed_mid_vote_and_counts_once() {
    let cluster = TestCluster::start(3, 1).await;
    let seeds = cluster.seeds();
    let env = on_cluster(
        &seeds,
        &[
            ("VOTEGRAPH_RATE_VOTE", "1000000/60"),
            ("VOTEGRAPH_RATE_POST", "1000/60"),
            ("VOTEGRAPH_RATE_SIGN_UP", "1000/60"),
        ],
    );
    let killed = Binary::start("", &env).await;
    let other = serve(&cluster).await;
    let site = Site::at(&other.address);
    let mut posts = Vec::new();
    for poster in ["ann", "ben", "cat"] {
        let token = sign_up_at(&site.client, &site.address, poster).await;
        for n in 0..4 {
            posts.push(site.post(&token, &format!("{poster} {n}")).await);
        }
    }
    let mut voters = Vec::new();
    for n in 0..20 {
        voters.push(sign_up_at(&site.client, &site.address, &format!("voter{n}")).await);
    }
    let addresses = vec![killed.address.clone(), other.address.clone()];
    let stream = vote_until_killed(addresses, voters.clone(), posts);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop(killed); // SIGKILL
    assert!(stream.await.unwrap() > 0, "the stream ran before the kill");

    eventually(
        "karma and vote indexes to match the votes",
        Duration::from_secs(10),
        async || {
            let (karma, net) = (site.karma().await, site.net_votes().await);
            let (indexed, counted) = (
                indexed_votes(&site, &voters).await,
                counted_votes(&site).await,
            );
            let same = karma == net && indexed == counted;
            done_if(
                same,
                format!("{karma:?} vs {net:?}; {indexed:?} vs {counted:?}"),
            )
        },
    )
    .await;
    // And it stays so: nothing is applied twice by later drains.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(site.karma().await, site.net_votes().await);
    assert_eq!(
        indexed_votes(&site, &voters).await,
        counted_votes(&site).await
    );
}

/// Per article, the voters whose pages show an up and a down vote.
async fn indexed_votes(site: &Site, voters: &[String]) -> HashMap<String, (i64, i64)> {
    let mut tally: HashMap<String, (i64, i64)> = HashMap::new();
    for token in voters {
        for (id, vote) in site.my_votes(token).await {
            let (up, down) = tally.entry(id).or_default();
            *up += i64::from(vote == "UP");
            *down += i64::from(vote == "DOWN");
        }
    }
    tally
}

/// Per article, its up and down votes but its poster's own.
async fn counted_votes(site: &Site) -> HashMap<String, (i64, i64)> {
    let page = site.front_page("NEWEST", None).await;
    let counts = page.as_array().unwrap().iter().map(|a| {
        let id = a["id"].as_str().unwrap().to_owned();
        let (up, down) = (
            a["votes"].as_i64().unwrap(),
            a["downvotes"].as_i64().unwrap(),
        );
        (id, (up - 1, down))
    });
    counts.collect()
}

async fn node(cluster: &TestCluster, port: u16) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(cluster.node_url(port)).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// While the poster's shard cannot be written, the karma of votes on
/// other shards waits in their outboxes; a server killed then leaves it
/// there, and the next server applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karma_a_killed_server_left_in_the_outbox_is_applied_by_the_next() {
    let cluster = TestCluster::start(3, 0).await;
    let (killed, site) = impatient(&cluster, &[]).await;
    let (home, voter, elsewhere) = ann_and_a_voter(&cluster, &site).await;
    pause_writes(&cluster, home, 3_000).await;
    let votes = elsewhere.iter().map(|id| site.vote(&voter, id, "UP"));
    futures_util::future::join_all(votes).await;
    drop(killed); // SIGKILL, the changes still queued
    let queued: usize = outboxes(&cluster, home)
        .await
        .iter()
        .map(|entries| entries.iter().filter(|e| e.contains_key("member")).count())
        .sum();
    assert_eq!(
        queued,
        elsewhere.len(),
        "each vote's karma waits in an outbox"
    );

    let () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut node(&cluster, home).await)
        .await
        .unwrap();
    let next = serve(&cluster).await;
    let site = Site::at(&next.address);
    eventually("the queued karma", Duration::from_secs(10), async || {
        let karma = site.karma().await.get("ann").copied();
        done_if(karma == Some(12 + elsewhere.len() as i64), karma)
    })
    .await;
    assert_eq!(site.karma().await, site.net_votes().await);
    let mine = site.my_votes(&voter).await;
    assert!(elsewhere.iter().all(|id| mine[id] == "UP"), "{mine:?}");
}

/// Ann, who posts 12 articles; her primary; a voter whose own keys (their
/// vote counter) are on another; and her articles that are not on hers.
async fn ann_and_a_voter(cluster: &TestCluster, site: &Site) -> (u16, String, Vec<String>) {
    let ann = sign_up_at(&site.client, &site.address, "ann").await;
    let mut posts = Vec::new();
    for n in 0..12 {
        posts.push(site.post(&ann, &format!("ann {n}")).await);
    }
    let home = cluster.holder("user:ann").await;
    let mut n = 0;
    let voter = loop {
        let name = format!("voter{n}");
        let token = sign_up_at(&site.client, &site.address, &name).await;
        if cluster.holder(&format!("user:{name}")).await != home {
            break token;
        }
        n += 1;
    };
    let mut elsewhere = Vec::new();
    for id in &posts {
        if cluster.holder(&format!("article:{id}")).await != home {
            elsewhere.push(id.clone());
        }
    }
    assert!(!elsewhere.is_empty());
    (home, voter, elsewhere)
}

async fn pause_writes(cluster: &TestCluster, port: u16, ms: u64) {
    pause(cluster, port, ms, "WRITE").await;
}

/// Pauses the clients of the node on `port` (not the cluster bus) for
/// `ms`: their writes, or `ALL` their commands.
async fn pause(cluster: &TestCluster, port: u16, ms: u64, what: &str) {
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg(what)
        .query_async(&mut node(cluster, port).await)
        .await
        .unwrap();
}

/// The entries of every shard's outbox on the primaries but `but`.
async fn outboxes(cluster: &TestCluster, but: u16) -> Vec<Vec<redis::streams::StreamId>> {
    let mut out = Vec::new();
    for port in cluster.primaries().await.into_iter().filter(|&p| p != but) {
        let mut conn = node(cluster, port).await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*}outbox")
            .query_async(&mut conn)
            .await
            .unwrap();
        for key in keys {
            let entries: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(&key)
                .arg("-")
                .arg("+")
                .query_async(&mut conn)
                .await
                .unwrap();
            out.push(entries.ids);
        }
    }
    out
}

/// Each shard's `votegraph_outbox_entries` on `/metrics`.
async fn outbox_gauges(site: &Site) -> Vec<f64> {
    let families = parse(&metrics_text(&site.client, &site.address).await);
    let shards = (0..SHARDS).map(|s| s.to_string());
    let held = shards.map(|s| value(&families, "votegraph_outbox_entries", &[("shard", &s)]));
    held.collect::<Option<_>>().expect("a gauge for each shard")
}

/// While the shard karma goes to cannot be written, the outboxes of the
/// shards voted on hold about their limit: past it, votes there are
/// refused, unwritten, until the outbox drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outbox_refuses_writes_until_it_drains() {
    if needed(
        "a_full_outbox_refuses_writes_until_it_drains",
        Program::PrometheusParser,
    )
    .is_none()
    {
        return;
    }
    const LIMIT: usize = 4;
    let cluster = TestCluster::start(3, 0).await;
    let more = [
        ("VOTEGRAPH_RATE_VOTE", "1000000/60"),
        ("VOTEGRAPH_OUTBOX_MAX_ENTRIES", "4"),
    ];
    let (_server, site) = impatient(&cluster, &more).await;
    let (home, voter, elsewhere) = ann_and_a_voter(&cluster, &site).await;
    pause_writes(&cluster, home, 6_000).await;
    // Up and down in turn: every vote changes karma on Ann's shard.
    let (mut cast, mut refused) = (HashMap::new(), 0);
    for round in 0..200 {
        let id = &elsewhere[round % elsewhere.len()];
        let direction = ["UP", "DOWN"][(round / elsewhere.len()) % 2];
        let body = site
            .gql(VOTE_AS, json!({ "id": id, "d": direction }), Some(&voter))
            .await;
        match body["errors"][0]["extensions"]["code"].as_str() {
            None => {
                cast.insert(id.clone(), direction);
            }
            Some("SERVICE_UNAVAILABLE") => refused += 1,
            Some(code) => panic!("{code}: {body}"),
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let held: Vec<usize> = outboxes(&cluster, home)
        .await
        .iter()
        .map(Vec::len)
        .collect();
    assert!(refused > 100, "{refused} of 200 votes refused");
    // Each shard's drain reads its outbox's length about three times a
    // second here (its applications time out): what it admits meanwhile
    // is the slack over the limit.
    assert!(held.iter().all(|&n| n <= LIMIT + 24), "{held:?}");
    let gauges = outbox_gauges(&site).await;
    assert!(gauges.iter().any(|&n| n >= LIMIT as f64), "{gauges:?}");

    // Once the shard is writable again, the outboxes drain and votes pass.
    eventually("votes to pass again", Duration::from_secs(10), async || {
        let vars = json!({ "id": elsewhere[0], "d": "NONE" });
        let body = site.gql(VOTE_AS, vars, Some(&voter)).await;
        done_if(body.get("errors").is_none(), body)
    })
    .await;
    cast.insert(elsewhere[0].clone(), "NONE");
    eventually(
        "karma and votes to settle",
        Duration::from_secs(10),
        async || {
            let (karma, net) = (site.karma().await, site.net_votes().await);
            let mine = site.my_votes(&voter).await;
            let gauges = outbox_gauges(&site).await;
            let settled = karma == net && cast.iter().all(|(id, d)| mine[id] == *d);
            done_if(
                settled && gauges.iter().all(|&n| n == 0.0),
                format!("{karma:?} vs {net:?}; {mine:?} vs {cast:?}; outboxes {gauges:?}"),
            )
        },
    )
    .await;
}

/// What a stream of unique up-votes saw: the (voter, article) pairs
/// acknowledged, and the error codes of those refused (sent again).
#[derive(Default)]
struct Stream {
    acked: Vec<(usize, String)>,
    refused: HashMap<String, usize>,
}

/// Votes every (voter, article) pair up once, `workers` at a time,
/// sending a refused vote again (voting the same way twice is a no-op),
/// until the pairs run out or `stop` is set.
async fn vote_stream(
    site: &Site,
    voters: &[String],
    posts: &[String],
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Stream {
    let pairs: Vec<(usize, String)> = (0..voters.len())
        .flat_map(|v| posts.iter().map(move |p| (v, p.clone())))
        .collect();
    let pairs = std::sync::Arc::new(std::sync::Mutex::new(pairs.into_iter()));
    let mut workers = Vec::new();
    for _ in 0..6 {
        let (pairs, stop) = (pairs.clone(), stop.clone());
        let (client, address, voters) =
            (site.client.clone(), site.address.clone(), voters.to_vec());
        workers.push(tokio::spawn(async move {
            let mut seen = Stream::default();
            let mut retry = None;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Some((v, id)) = retry.take().or_else(|| pairs.lock().unwrap().next()) else {
                    break;
                };
                let vars = json!({ "id": id, "d": "UP" });
                let body = gql_at(&client, &address, VOTE_AS, vars, Some(&voters[v]), None).await;
                match body["errors"][0]["extensions"]["code"].as_str() {
                    None => seen.acked.push((v, id)),
                    Some(code) => {
                        *seen.refused.entry(code.to_owned()).or_default() += 1;
                        retry = Some((v, id));
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            seen
        }));
    }
    let mut all = Stream::default();
    for worker in workers {
        let seen = worker.await.unwrap();
        all.acked.extend(seen.acked);
        for (code, n) in seen.refused {
            *all.refused.entry(code).or_default() += n;
        }
    }
    all
}

impl Stream {
    /// Every refusal was a documented, retryable one, and every
    /// acknowledged vote reads UP to its voter (once their shard's
    /// outbox is applied).
    async fn check(&self, site: &Site, voters: &[String]) {
        for code in self.refused.keys() {
            assert!(RETRYABLE.contains(&code.as_str()), "{:?}", self.refused);
        }
        eventually(
            "no acknowledged vote lost",
            Duration::from_secs(10),
            async || {
                let up = up_votes(site, voters).await;
                let lost: Vec<_> = self
                    .acked
                    .iter()
                    .filter(|(v, id)| !up[*v].contains(id))
                    .collect();
                done_if(
                    lost.is_empty(),
                    format!("acknowledged votes lost: {lost:?}"),
                )
            },
        )
        .await;
    }
}

/// The articles each voter's votes read UP on, as the voter sees them.
async fn up_votes(site: &Site, voters: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for token in voters {
        let page = site.front_page("NEWEST", Some(token)).await;
        let up = page
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["myVote"] == "UP")
            .map(|a| a["id"].as_str().unwrap().to_owned())
            .collect();
        out.push(up);
    }
    out
}

/// Signs up a poster with `posts` articles and `voters` voters.
async fn seed(site: &Site, posts: usize, voters: usize) -> (Vec<String>, Vec<String>) {
    let poster = sign_up_at(&site.client, &site.address, "poster").await;
    let mut ids = Vec::new();
    for n in 0..posts {
        ids.push(site.post(&poster, &format!("story {n}")).await);
    }
    let mut tokens = Vec::new();
    for n in 0..voters {
        tokens.push(sign_up_at(&site.client, &site.address, &format!("reader{n}")).await);
    }
    (ids, tokens)
}

/// The errors a vote may get while a primary fails over or slots move,
/// each documented as retryable (docs/api.md): nothing written, or
/// written and said so.
const RETRYABLE: [&str; 3] = ["INTERNAL", "OUTCOME_UNKNOWN", "NOT_REPLICATED"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_failover_loses_no_acknowledged_vote_with_wait_replicas() {
    let mut cluster = TestCluster::start(3, 1).await;
    let mut settings = test_settings_for("redis://unused");
    settings.redis_url = None;
    settings.redis_cluster_nodes = Some(cluster.seeds());
    settings.wait_replicas = 1;
    settings.redis_timeout_ms = 1000;
    let server = spawn_server(settings).await;
    let site = Site::at(&server.address);
    let (posts, voters) = seed(&site, 24, 30).await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stream = {
        let site = Site::at(&server.address);
        let (posts, voters, stop) = (posts.clone(), voters.clone(), stop.clone());
        tokio::spawn(async move { vote_stream(&site, &voters, &posts, stop).await })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    let victim = cluster.primaries().await[0];
    cluster.kill(victim);
    // The cluster promotes the victim's replica; the victim comes back as
    // a replica of it, as its operator would bring it back, so that
    // writes find the replica `--wait-replicas 1` asks for.
    eventually("a new primary", Duration::from_secs(30), async || {
        let primaries = cluster.primaries().await;
        done_if(
            primaries.len() == 3 && !primaries.contains(&victim),
            primaries,
        )
    })
    .await;
    cluster
        .restart(victim)
        .await
        .expect("the old primary restarts");
    cluster
        .wait_healthy(Duration::from_secs(30))
        .await
        .expect("healthy again");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let stream = stream.await.unwrap();

    let refused: usize = stream.refused.values().sum();
    assert!(
        stream.acked.len() > 100,
        "votes flowed: {}",
        stream.acked.len()
    );
    assert!(refused > 0, "the failover was noticed");
    stream.check(&site, &voters).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_move_between_primaries_under_votes_and_reads() {
    let cluster = TestCluster::start(3, 0).await;
    let server = serve(&cluster).await;
    let site = Site::at(&server.address);
    let (posts, voters) = seed(&site, 24, 30).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stream = {
        let site = Site::at(&server.address);
        let (posts, voters, stop) = (posts.clone(), voters.clone(), stop.clone());
        tokio::spawn(async move { vote_stream(&site, &voters, &posts, stop).await })
    };
    // Reads run beside the votes: every page is whole and in order.
    let reader = {
        let (site, stop) = (Site::at(&server.address), stop.clone());
        tokio::spawn(async move {
            let mut pages = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let body = site
                    .gql(
                        "{ articles(pageSize: 50) { id score } articleCount }",
                        json!({}),
                        None,
                    )
                    .await;
                if body["errors"].is_null() {
                    let page = body["data"]["articles"].as_array().unwrap().clone();
                    assert_eq!(page.len(), 24, "{body}");
                    assert_eq!(body["data"]["articleCount"], 24, "{body}");
                    let scores: Vec<f64> =
                        page.iter().map(|a| a["score"].as_f64().unwrap()).collect();
                    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
                    pages += 1;
                } else {
                    let code = body["errors"][0]["extensions"]["code"]
                        .as_str()
                        .unwrap_or("");
                    assert!(RETRYABLE.contains(&code), "{body}");
                }
            }
            pages
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Half the first primary's slots, half its shards among them, move
    // to the second, then back.
    let primaries = cluster.primaries().await;
    cluster.reshard(primaries[0], primaries[1], 2_730).await;
    cluster.reshard(primaries[1], primaries[0], 2_730).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let stream = stream.await.unwrap();
    assert!(reader.await.unwrap() > 0, "pages were read meanwhile");
    stream.check(&site, &voters).await;
    assert_eq!(site.karma().await, site.net_votes().await);
}
