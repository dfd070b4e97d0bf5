//! Losing any one node of a 3-primary, 3-replica cluster, each of the six
//! in turn (the first seed named included, primaries and replicas alike),
//! while it stays down: once the cluster has promoted a replica and its
//! nodes agree on it (at once for a replica), both instances answer every
//! request within 5 s, the outboxes drain and `/health` says `ok` or
//! `degraded`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{
    done_if, eventually, gql_at, health_at, sign_up_at, spawn_server, test_settings_for, Instance,
    TestCluster, VOTE_AS,
};
use crate::metrics::metrics_text;

/// How long after the promotion every request must answer again.
const SETTLE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serves_on_after_losing_any_one_node() {
    for victim in 0..6 {
        lose_node(victim).await;
    }
}

/// A server on `cluster`.
async fn serve(cluster: &TestCluster) -> Instance {
    let mut settings = test_settings_for("redis://unused");
    settings.redis_url = None;
    settings.redis_cluster_nodes = Some(cluster.seeds());
    spawn_server(settings).await
}

/// The site both instances serve: voters' tokens and articles.
struct Seeded {
    tokens: Vec<String>,
    articles: Vec<String>,
}

async fn seed(client: &reqwest::Client, address: &str) -> Seeded {
    let mut seeded = Seeded {
        tokens: Vec::new(),
        articles: Vec::new(),
    };
    let post = "mutation($t: String!, $l: String!) { post(title: $t, link: $l) { id } }";
    for n in 0..6 {
        let token = sign_up_at(client, address, &format!("voter{n}")).await;
        for m in 0..2 {
            let vars = json!({ "t": format!("story {n} {m}"), "l": format!("https://example.com/{n}/{m}") });
            let body = gql_at(client, address, post, vars, Some(&token), None).await;
            let id = body["data"]["post"]["id"].as_str().expect("posted");
            seeded.articles.push(id.to_owned());
        }
        seeded.tokens.push(token);
    }
    seeded
}

/// The requests of one round through `address` that failed, reads and a
/// vote.
async fn failures(
    client: &reqwest::Client,
    address: &str,
    site: &Seeded,
    round: usize,
) -> Vec<Value> {
    let mut bad = Vec::new();
    let reads = [
        "{ articles(order: SCORE, pageSize: 25) { id votes } articleCount }",
        "{ topPosters { user { name } karma } }",
        "{ feed(first: 10) { edges { node { id } } } }",
    ];
    let token = &site.tokens[round % site.tokens.len()];
    for read in reads {
        let body = gql_at(client, address, read, json!({}), Some(token), None).await;
        if body["errors"].is_array() {
            bad.push(body);
        }
    }
    let id = &site.articles[round % site.articles.len()];
    let direction = ["UP", "DOWN", "NONE"][round % 3];
    let vote = json!({ "id": id, "d": direction });
    let body = gql_at(client, address, VOTE_AS, vote, Some(token), None).await;
    let code = body["errors"][0]["extensions"]["code"]
        .as_str()
        .unwrap_or("");
    if body["errors"].is_array() && code != "NOT_REPLICATED" {
        bad.push(body);
    }
    bad
}

/// The entries the shards' outboxes held at `address`'s last drain.
async fn outbox_backlog(client: &reqwest::Client, address: &str) -> f64 {
    let text = metrics_text(client, address).await;
    text.lines()
        .filter(|line| line.starts_with("votegraph_outbox_entries{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn lose_node(index: usize) {
    let mut cluster = TestCluster::start(3, 1).await;
    let (a, b) = (serve(&cluster).await, serve(&cluster).await);
    let client = reqwest::Client::new();
    let site = seed(&client, &a.address).await;
    let victim = cluster.ports()[index];
    let was_primary = cluster.primaries().await.contains(&victim);
    cluster.kill(victim);
    if was_primary {
        eventually("a replica promoted", Duration::from_secs(30), async || {
            let primaries = cluster.primaries().await;
            done_if(
                primaries.len() == 3 && !primaries.contains(&victim),
                primaries,
            )
        })
        .await;
    }
    // Promoted once every running node agrees who serves every slot.
    let healthy = cluster.wait_healthy(Duration::from_secs(30)).await;
    healthy.expect("the cluster agrees on its primaries");
    let promoted = Instant::now();
    let what = format!("node {index} ({victim}) lost: a clean round on both instances");
    let mut round = 0;
    eventually(&what, SETTLE, async || {
        round += 1;
        let mut bad = failures(&client, &a.address, &site, round).await;
        bad.extend(failures(&client, &b.address, &site, round).await);
        done_if(bad.is_empty(), bad)
    })
    .await;
    for round in 0..6 {
        for address in [&a.address, &b.address] {
            let bad = failures(&client, address, &site, round).await;
            assert!(
                bad.is_empty(),
                "node {index} lost, {:?} after: {bad:?}",
                promoted.elapsed()
            );
        }
    }
    for address in [&a.address, &b.address] {
        let what = format!("node {index} lost: the outboxes at {address} drained");
        eventually(&what, SETTLE, async || {
            let backlog = outbox_backlog(&client, address).await;
            done_if(backlog == 0.0, backlog)
        })
        .await;
        let health = health_at(&client, address).await;
        let status = health["status"].as_str().unwrap_or_default();
        assert!(
            matches!(status, "ok" | "degraded"),
            "node {index} lost: {health}"
        );
    }
}
