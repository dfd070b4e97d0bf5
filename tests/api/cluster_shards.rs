//! The cluster keyspace's shard count: chosen when the keyspace is made,
//! kept in it, refused if changed, six for a keyspace that records none;
//! and spread evenly over 3, 4 and 6 primaries by default.

use std::collections::{HashMap, HashSet};

use futures_util::StreamExt;
use redis::AsyncCommands;
use serde_json::json;
use votegraph::config::Settings;
use votegraph::startup::Application;

use crate::helpers::{gql_at, sign_up_at, spawn_server, test_settings_for, Instance, TestCluster};

/// The test settings on `cluster`, asking for `shards`.
fn on_cluster(cluster: &TestCluster, shards: Option<u16>) -> Settings {
    let mut settings = test_settings_for("redis://unused");
    settings.redis_url = None;
    settings.redis_cluster_nodes = Some(cluster.seeds());
    settings.cluster_shards = shards;
    settings
}

/// Posts `count` articles as one new user, 16 at a time; their ids.
async fn post_many(server: &Instance, count: usize) -> Vec<u64> {
    let client = reqwest::Client::new();
    let token = sign_up_at(&client, &server.address, "poster").await;
    let (client, token) = (&client, &token);
    let query = "mutation($t: String!, $l: String!) { post(title: $t, link: $l) { id } }";
    let posts = (0..count).map(|i| async move {
        let vars = json!({ "t": format!("story {i}"), "l": format!("https://example.com/{i}") });
        let body = gql_at(client, &server.address, query, vars, Some(token), None).await;
        let id = body["data"]["post"]["id"].as_str();
        id.unwrap_or_else(|| panic!("{body}"))
            .parse::<u64>()
            .unwrap()
    });
    futures_util::stream::iter(posts)
        .buffered(16)
        .collect()
        .await
}

/// The titles of the front page, newest first.
async fn newest_titles(server: &Instance) -> Vec<String> {
    let client = reqwest::Client::new();
    let query = "{ articles(order: NEWEST, pageSize: 50) { title } }";
    let body = gql_at(&client, &server.address, query, json!({}), None, None).await;
    let list = body["data"]["articles"].as_array();
    let list = list.unwrap_or_else(|| panic!("{body}"));
    list.iter()
        .map(|a| a["title"].as_str().unwrap().to_owned())
        .collect()
}

/// Each primary's article hashes, `{tag}article:<id>`, as (tag, id).
async fn article_hashes(cluster: &TestCluster) -> Vec<Vec<(String, u64)>> {
    let mut out = Vec::new();
    for port in cluster.primaries().await {
        let client = redis::Client::open(cluster.node_url(port)).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = conn.keys("*}article:*").await.unwrap();
        let hashes = keys.iter().filter_map(|key| {
            let (tag, rest) = key.split_once('}')?;
            Some((
                format!("{tag}}}"),
                rest.strip_prefix("article:")?.parse().ok()?,
            ))
        });
        out.push(hashes.collect());
    }
    out
}

/// The shard tags that article hashes carry, on every primary.
async fn article_tags(cluster: &TestCluster) -> HashSet<String> {
    let held = article_hashes(cluster).await.into_iter().flatten();
    held.map(|(tag, _)| tag).collect()
}

async fn recorded_shards(cluster: &TestCluster) -> Option<u16> {
    let client = redis::cluster::ClusterClient::new(vec![cluster.node_url(cluster.ports()[0])]);
    let mut conn = client.unwrap().get_async_connection().await.unwrap();
    conn.hget("keyspace", "shards").await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn articles_spread_evenly_over_three_four_and_six_primaries() {
    // Each goes to its slug's shard: enough that chance stays well inside.
    const ARTICLES: usize = 1_200;
    for primaries in [3, 4, 6] {
        let cluster = TestCluster::start(primaries, 0).await;
        let server = spawn_server(on_cluster(&cluster, None)).await;
        post_many(&server, ARTICLES).await;
        let held = article_hashes(&cluster).await;
        let fair = ARTICLES as f64 / primaries as f64;
        for hashes in &held {
            let share = hashes.len() as f64;
            assert!(
                (share - fair).abs() <= fair * 0.1,
                "{primaries} primaries: {held:?}"
            );
        }
        // An id names its shard: ids alike modulo the count share a tag.
        let mut tags: HashMap<u64, HashSet<String>> = HashMap::new();
        for (tag, id) in held.into_iter().flatten() {
            tags.entry(id % 12).or_default().insert(tag);
        }
        assert_eq!(tags.len(), 12, "{tags:?}");
        assert!(tags.values().all(|t| t.len() == 1), "{tags:?}");
        let distinct: HashSet<_> = tags.values().flatten().collect();
        assert_eq!(distinct.len(), 12);
        assert_eq!(recorded_shards(&cluster).await, Some(12));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_count_a_keyspace_was_made_with_stays_and_a_change_is_refused() {
    let cluster = TestCluster::start(3, 0).await;
    let first = spawn_server(on_cluster(&cluster, Some(4))).await;
    let ids = post_many(&first, 8).await;
    let tags = article_tags(&cluster).await;
    assert_eq!(tags.len(), 4, "{tags:?} for {ids:?}");
    let pages = newest_titles(&first).await;
    drop(first);
    assert_eq!(recorded_shards(&cluster).await, Some(4));

    // Left out, the setting is the keyspace's.
    let again = spawn_server(on_cluster(&cluster, None)).await;
    assert_eq!(newest_titles(&again).await, pages);
    drop(again);

    let refused = Application::build(on_cluster(&cluster, Some(12))).await;
    let error = format!("{:#}", refused.err().expect("a changed count is refused"));
    assert!(
        error.contains("4 shards") && error.contains("12"),
        "{error}"
    );
}

/// A cluster keyspace made before the count was kept: six shards, which
/// it goes on with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyspace_that_records_no_count_has_six_shards() {
    let cluster = TestCluster::start(3, 0).await;
    let first = spawn_server(on_cluster(&cluster, Some(6))).await;
    post_many(&first, 12).await;
    let pages = newest_titles(&first).await;
    drop(first);
    let client = redis::cluster::ClusterClient::new(vec![cluster.node_url(cluster.ports()[0])]);
    let mut conn = client.unwrap().get_async_connection().await.unwrap();
    let _: () = conn.del("keyspace").await.unwrap();

    let server = spawn_server(on_cluster(&cluster, None)).await;
    assert_eq!(newest_titles(&server).await, pages);
    assert_eq!(recorded_shards(&cluster).await, Some(6));
    let tags = article_tags(&cluster).await;
    assert_eq!(tags.len(), 6, "{tags:?}");
}
