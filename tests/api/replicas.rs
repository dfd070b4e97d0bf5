//! A read replica (`--redis-replica-url`): anonymous queries read the site
//! from it; logged-in readers, writes and templates use the primary (so a
//! user reads their own writes); its lag shows in /health and /metrics.

use std::time::Duration;

use serde_json::json;

use crate::failover::{conn, info, start_node, EVERY};
use crate::helpers::{
    eventually_every, free_port, gql_at, health_at, sign_up_at, spawn_server, test_settings_for,
    wait_for_top_index,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_reads_go_to_the_replica_and_readers_see_their_own_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (p, r) = (free_port(), free_port());
    let _primary = start_node(dir.path(), p, None);
    let mut replica_process = Some(start_node(dir.path(), r, Some(p)));
    eventually_every(
        "the replica to sync",
        Duration::from_secs(10),
        EVERY,
        async || {
            info(r, "replication")
                .await
                .contains("master_link_status:up")
        },
    )
    .await;
    let mut settings = test_settings_for(&format!("redis://127.0.0.1:{p}"));
    settings.redis_replica_url = Some(format!("redis://127.0.0.1:{r}"));
    let server = spawn_server(settings).await;
    let client = reqwest::Client::new();
    let mut primary = conn(p).await.expect("primary");
    let mut replica = conn(r).await.expect("replica");
    wait_for_top_index(&mut primary).await;

    let alice = sign_up_at(&client, &server.address, "alice").await;
    let bob = sign_up_at(&client, &server.address, "bob").await;
    for i in 0..3 {
        let body = gql_at(
            &client,
            &server.address,
            &format!(
                "mutation {{ post(title: \"a{i}\", link: \"https://example.com\") {{ id }} }}"
            ),
            json!({}),
            Some(&alice),
            None,
        )
        .await;
        assert!(body["errors"].is_null(), "{body}");
    }
    let what = "the replica to hold the three articles";
    eventually_every(what, Duration::from_secs(5), EVERY, async || {
        info(r, "keyspace").await.contains("keys=")
            && redis::cmd("ZCARD")
                .arg("score:")
                .query_async::<i64>(&mut conn(r).await.unwrap())
                .await
                .unwrap_or(0)
                == 3
    })
    .await;

    // An anonymous page: read from the replica, not the primary (once the
    // sampler has seen the replica's link up).
    eventually_every(
        "the replica's link up",
        Duration::from_secs(5),
        EVERY,
        async || health_at(&client, &server.address).await["replica"]["linkUp"] == true,
    )
    .await;
    // The replica alone is told another title for article 1, so a page
    // shows which server it was read from.
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg("no")
        .query_async(&mut replica)
        .await
        .unwrap();
    let () = redis::cmd("HSET")
        .arg("article:1")
        .arg("title")
        .arg("on the replica")
        .query_async(&mut replica)
        .await
        .unwrap();
    let page = gql_at(
        &client,
        &server.address,
        "{ articles { id title votes } }",
        json!({}),
        None,
        None,
    )
    .await;
    assert_eq!(
        page["data"]["articles"].as_array().unwrap().len(),
        3,
        "{page}"
    );
    let titles: Vec<&str> = page["data"]["articles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["title"].as_str().unwrap())
        .collect();
    assert!(titles.contains(&"on the replica"), "{page}");

    // A logged-in reader's vote, then their page at once: the primary, so
    // they see their own write.
    for direction in ["UP", "DOWN", "NONE", "UP"] {
        let voted = gql_at(
            &client,
            &server.address,
            &format!("mutation {{ vote(articleId: \"2\", direction: {direction}) {{ id }} }}"),
            json!({}),
            Some(&bob),
            None,
        )
        .await;
        assert!(voted["errors"].is_null(), "{voted}");
        let mine = gql_at(
            &client,
            &server.address,
            "{ article(id: \"2\") { votes downvotes myVote } }",
            json!({}),
            Some(&bob),
            None,
        )
        .await;
        let want = match direction {
            "UP" => json!({ "votes": 2, "downvotes": 0, "myVote": "UP" }),
            "DOWN" => json!({ "votes": 1, "downvotes": 1, "myVote": "DOWN" }),
            _ => json!({ "votes": 1, "downvotes": 0, "myVote": "NONE" }),
        };
        assert_eq!(mine["data"]["article"], want, "after {direction}");
    }
    let mine = gql_at(
        &client,
        &server.address,
        "{ article(id: \"1\") { title } }",
        json!({}),
        Some(&bob),
        None,
    )
    .await;
    assert_eq!(mine["data"]["article"]["title"], "a0", "logged-in reads");

    // The lag is visible, and so is a replica that went away.
    eventually_every(
        "the replica's lag to show",
        Duration::from_secs(5),
        EVERY,
        async || {
            let h = health_at(&client, &server.address).await;
            h["replica"]["linkUp"] == true && h["replica"]["lagBytes"].as_i64() >= Some(0)
        },
    )
    .await;
    let metrics = client
        .get(format!("{}/metrics", server.address))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("votegraph_redis_replica_lag_bytes "),
        "{metrics}"
    );
    assert!(
        metrics.contains("votegraph_redis_replica_link_up 1"),
        "{metrics}"
    );
    drop(replica_process.take());
    eventually_every(
        "a replica gone to show",
        Duration::from_secs(5),
        EVERY,
        async || {
            let h = health_at(&client, &server.address).await;
            h["replica"]["linkUp"] == false && h["replica"]["lagBytes"] == -1
        },
    )
    .await;
    // Anonymous reads went back to the primary.
    let page = gql_at(
        &client,
        &server.address,
        "{ a: articles(pageSize: 2) { id } }",
        json!({}),
        None,
        None,
    )
    .await;
    assert!(page["errors"].is_null(), "{page}");
}
