//! An article's `votes` and `downvotes` follow its voted sets, whatever
//! another writer kept in the hash: a direct writer that moves voters with
//! `SMOVE` and adjusts `score:` but not the counts, and one whose count
//! lands after the derivation that its set write started. Once voting has
//! closed the sets expire and the hash's counts stand.

use std::time::Duration;

use redis::AsyncCommands;
use serde_json::{json, Value};

use crate::helpers::{eventually, spawn_app, TestApp};

/// The promise: the counts follow the sets within a second.
const WITHIN: Duration = Duration::from_secs(1);

async fn counts(app: &TestApp, id: &str, token: &str) -> Value {
    let query = "query($id: ID!) { article(id: $id) { votes downvotes myVote } }";
    app.gql_ok(query, json!({ "id": id }), Some(token)).await["article"].clone()
}

/// Waits until the article shows `want`.
async fn shows(app: &TestApp, id: &str, token: &str, want: Value) {
    eventually("the counts of the voted sets", WITHIN, async || {
        let seen = counts(app, id, token).await;
        (seen == want).then_some(()).ok_or(seen)
    })
    .await;
}

#[tokio::test]
async fn a_direct_smove_downvote_that_keeps_no_count_shows_the_sets_sizes() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let carol = app.sign_up("carol").await;
    let id = app.post(&alice, "moved", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.vote_as(&bob, &id, "UP").await;
    app.vote_as(&carol, &id, "UP").await;
    let (voted, downvoted, article) = (
        format!("voted:{id}"),
        format!("downvoted:{id}"),
        format!("article:{id}"),
    );
    // The writer turns both upvotes into downvotes: the sets and the score,
    // not the hash.
    // One transaction, so the hash is read before the derivation can fix it.
    let mut conn = app.redis.conn().await;
    let mut writes = redis::pipe();
    writes.atomic();
    for voter in ["user:bob", "user:carol"] {
        writes.smove(&voted, &downvoted, voter);
        writes.zincr("score:", &article, -864).ignore();
    }
    writes.hget(&article, "votes").hget(&article, "downvotes");
    let (moved_bob, moved_carol, votes, downvotes): (bool, bool, u64, u64) =
        writes.query_async(&mut conn).await.unwrap();
    assert!(moved_bob && moved_carol);
    assert_eq!(
        (votes, downvotes),
        (3, 0),
        "what the writer left in the hash"
    );
    shows(
        &app,
        &id,
        &bob,
        json!({ "votes": 1, "downvotes": 2, "myVote": "DOWN" }),
    )
    .await;

    // A count written after the derivation its set write started: the
    // writer's upvote of dave, its HINCRBY a while after the SADD.
    let dave = app.sign_up("dave").await;
    let _: () = conn.sadd(&voted, "user:dave").await.unwrap();
    let _: f64 = conn.zincr("score:", &article, 432).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _: () = conn.hincr(&article, "votes", 1).await.unwrap();
    shows(
        &app,
        &id,
        &dave,
        json!({ "votes": 2, "downvotes": 2, "myVote": "UP" }),
    )
    .await;
    app.wait_for_derivations().await;
    assert_eq!(
        counts(&app, &id, &dave).await,
        json!({ "votes": 2, "downvotes": 2, "myVote": "UP" })
    );
}

#[tokio::test]
async fn once_the_sets_expire_the_hash_counts_stand() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let id = app.post(&alice, "closing", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.vote_as(&bob, &id, "DOWN").await;
    app.wait_for_derivations().await;
    // Voting closes: the sets expire, as the book has them do.
    let mut conn = app.redis.conn().await;
    for set in [format!("voted:{id}"), format!("downvoted:{id}")] {
        let _: bool = conn.pexpire(&set, 1).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let left: u64 = conn
        .exists(&[format!("voted:{id}"), format!("downvoted:{id}")])
        .await
        .unwrap();
    assert_eq!(left, 0);
    // Another writer adds the article to a group: it is derived again.
    let _: () = conn
        .sadd("group:archive", format!("article:{id}"))
        .await
        .unwrap();
    eventually("the group followed", WITHIN, async || {
        let query = "query($id: ID!) { article(id: $id) { groups votes downvotes } }";
        let seen = app.gql_ok(query, json!({ "id": id }), None).await["article"].clone();
        let want = json!({ "groups": ["archive"], "votes": 1, "downvotes": 1 });
        (seen == want).then_some(()).ok_or(seen)
    })
    .await;
    app.wait_for_derivations().await;
    let hash: (u64, u64) = conn
        .hmget(format!("article:{id}"), &["votes", "downvotes"])
        .await
        .unwrap();
    assert_eq!(hash, (1, 1), "the counts stand");
}
