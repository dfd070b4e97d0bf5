//! The anonymous response cache: hits cost no Redis work, votes anywhere
//! invalidate it, and nothing is served older than a second.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::{reads_processed, spawn_app, spawn_server, test_settings};

const FRONT: &str = "{ articles { id title votes score } }";

#[tokio::test]
async fn a_repeated_anonymous_page_is_served_from_memory() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "cached", &[]).await;
    let first = app.gql_ok(FRONT, json!({}), None).await;

    let mut redis = app.redis.conn().await;
    let r0 = reads_processed(&mut redis).await;
    let r1 = reads_processed(&mut redis).await;
    let second = app.gql_ok(FRONT, json!({}), None).await;
    let r2 = reads_processed(&mut redis).await;
    assert_eq!(first, second);
    assert_eq!(r2 - r1, r1 - r0, "the second read did not touch Redis");

    // Logged-in requests are never served from the cache.
    let with_login = app
        .gql_ok("{ articles { id myVote } }", json!({}), Some(&alice))
        .await;
    assert_eq!(with_login["articles"][0]["myVote"], "UP");
}

#[tokio::test]
async fn writes_invalidate_at_once_even_on_another_instance() {
    let app = spawn_app().await;
    let other = spawn_server(test_settings(&app.redis)).await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "first", &[]).await;
    assert_eq!(
        app.gql_ok(FRONT, json!({}), None).await["articles"][0]["votes"],
        1
    );

    // A local write invalidates immediately.
    app.post(&alice, "second", &[]).await;
    assert_eq!(
        app.gql_ok(FRONT, json!({}), None).await["articles"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // A vote on the other instance invalidates when its event arrives,
    // well before the one-second bound.
    let started = Instant::now();
    let voted = reqwest::Client::new()
        .post(format!("{}/graphql", other.address))
        .bearer_auth(&bob)
        .json(&json!({ "query": "mutation { vote(articleId: \"1\") { votes } }" }))
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap();
    assert_eq!(voted["data"]["vote"]["votes"], 2, "{voted}");
    loop {
        let data = app.gql_ok(FRONT, json!({}), None).await;
        let first = data["articles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == "1")
            .unwrap()
            .clone();
        if first["votes"] == 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_millis(900),
            "the vote was hidden too long"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn nothing_is_served_older_than_a_second() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "old title", &[]).await;
    assert_eq!(
        app.gql_ok(FRONT, json!({}), None).await["articles"][0]["title"],
        "old title"
    );
    // A change behind votegraph's back (no event): visible within a second.
    let mut redis = app.redis.conn().await;
    let _: () = redis.hset("article:1", "title", "new title").await.unwrap();
    let changed = Instant::now();
    loop {
        let title = app.gql_ok(FRONT, json!({}), None).await["articles"][0]["title"].clone();
        if title == "new title" {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_millis(1200),
            "stale for more than a second"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
