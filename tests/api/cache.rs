//! The anonymous response cache: hits cost no Redis work, votes anywhere
//! drop what they may change, and nothing is served older than a second.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::{
    done_if, eventually_every, kill_pubsub_connections, now, reads_processed, spawn_app,
    spawn_server, test_settings,
};

const FRONT: &str = "{ articles { id title votes score } }";

#[tokio::test]
async fn a_repeated_anonymous_page_is_served_from_memory() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "cached", &[]).await;
    let first = app.gql_ok(FRONT, json!({}), None).await;

    let mut redis = app.redis.conn().await;
    app.wait_for_derivations().await;
    let r0 = reads_processed(&mut redis).await;
    let r1 = reads_processed(&mut redis).await;
    let second = app.gql_ok(FRONT, json!({}), None).await;
    let r2 = reads_processed(&mut redis).await;
    assert_eq!(first, second);
    assert_eq!(r2 - r1, r1 - r0, "the second read did not touch Redis");

    // A logged-in request is not served the anonymous response: its page
    // comes from a shared template, filled with the reader's own votes.
    let with_login = app
        .gql_ok("{ articles { id myVote } }", json!({}), Some(&alice))
        .await;
    assert_eq!(with_login["articles"][0]["myVote"], "UP");
}

#[tokio::test]
async fn aliases_of_one_page_answer_the_same_data() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    for i in 0..3 {
        app.post(&alice, &format!("article {i}"), &[]).await;
    }
    let query = "{ a: articles(pageSize: 2) { id votes score myVote } \
                   b: articles(pageSize: 2) { id votes score myVote } }";
    for caller in [None, Some(alice.as_str())] {
        let page = app.gql_ok(query, json!({}), caller).await;
        assert_eq!(page["a"].as_array().unwrap().len(), 2, "{page}");
        assert_eq!(page["a"], page["b"], "{page}");
    }
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
    eventually_every(
        "the vote, which was hidden too long",
        Duration::from_millis(900).saturating_sub(started.elapsed()),
        Duration::from_millis(10),
        async || {
            let data = app.gql_ok(FRONT, json!({}), None).await;
            let first = data["articles"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["id"] == "1")
                .unwrap()
                .clone();
            done_if(first["votes"] == 2, first)
        },
    )
    .await;
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
    eventually_every(
        "the new title, stale for more than a second",
        Duration::from_millis(1200).saturating_sub(changed.elapsed()),
        Duration::from_millis(50),
        async || {
            let title = app.gql_ok(FRONT, json!({}), None).await["articles"][0]["title"].clone();
            done_if(title == "new title", title)
        },
    )
    .await;
}

#[tokio::test]
async fn a_vote_far_below_a_cached_page_leaves_it_cached() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    for i in 0..3 {
        app.post(&alice, &format!("recent {i}"), &[]).await;
    }
    // An article posted three days ago: open to votes, far below the page.
    let old = app.post(&alice, "three days old", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let then = now() - 3.0 * 86_400.0;
    let mut redis = app.redis.conn().await;
    let member = format!("article:{old}");
    let _: () = redis.hset(&member, "time", then).await.unwrap();
    let _: () = redis.zadd("time:", &member, then).await.unwrap();
    let _: () = redis.zadd("score:", &member, then + 432.0).await.unwrap();

    let page = "{ articles(pageSize: 3) { id votes } }";
    let before = app.gql_ok(page, json!({}), None).await;
    assert_eq!(before["articles"].as_array().unwrap().len(), 3);
    app.vote(&bob, &old).await;
    app.wait_for_derivations().await;

    let r0 = reads_processed(&mut redis).await;
    let r1 = reads_processed(&mut redis).await;
    let after = app.gql_ok(page, json!({}), None).await;
    let r2 = reads_processed(&mut redis).await;
    assert_eq!(after, before, "the vote could not change this page");
    assert_eq!(r2 - r1, r1 - r0, "and it is still served from memory");

    // A vote on an article of the page shows at once: it drops the page,
    // and the next read is computed from Redis.
    let top = before["articles"][0]["id"].as_str().unwrap().to_owned();
    app.vote(&bob, &top).await;
    let r0 = reads_processed(&mut redis).await;
    let r1 = reads_processed(&mut redis).await;
    let fresh = app.gql_ok(page, json!({}), None).await;
    let r2 = reads_processed(&mut redis).await;
    assert_eq!(fresh["articles"][0]["id"], top);
    assert_eq!(fresh["articles"][0]["votes"], 2);
    assert!(r2 - r1 > r1 - r0, "computed again");
    // One that reorders it is computed again.
    let last = before["articles"][2]["id"].as_str().unwrap().to_owned();
    for voter in ["carol", "dave"] {
        let token = app.sign_up(voter).await;
        app.vote(&token, &last).await;
    }
    let reordered = app.gql_ok(page, json!({}), None).await;
    assert_eq!(reordered["articles"][0]["id"], last);
    assert_eq!(reordered["articles"][0]["votes"], 3);
}

/// Events published while the pub/sub connection was down never arrive,
/// so the cache cannot know what they changed: resubscribing empties it.
#[tokio::test]
async fn a_lost_pubsub_connection_empties_the_response_cache() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "cached", &[]).await;
    app.gql_ok("{ articles { id votes } }", json!({}), None)
        .await;
    let before = app.health().await["responseCache"].clone();
    assert!(before["entries"].as_u64().unwrap() >= 1, "{before}");
    let mut redis = app.redis.conn().await;
    // The events' connection and the deriver's keyspace notifications.
    assert_eq!(kill_pubsub_connections(&mut redis).await, 2);
    eventually_every(
        "the cache to be emptied after the resubscription",
        Duration::from_secs(5),
        Duration::from_millis(50),
        async || {
            let stats = app.health().await["responseCache"].clone();
            done_if(
                stats["invalidations"].as_u64() > before["invalidations"].as_u64(),
                stats,
            )
        },
    )
    .await;
    // The page is computed again rather than served from before.
    let misses = app.health().await["responseCache"]["misses"].as_u64();
    app.gql_ok("{ articles { id votes } }", json!({}), None)
        .await;
    let after = app.health().await["responseCache"]["misses"].as_u64();
    assert_eq!(after, misses.map(|m| m + 1));
}
