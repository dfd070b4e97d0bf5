//! Logged-in pages from shared templates (`src/templates.rs`): readers share
//! one computation of a page, each sees their own `myVote`, their own votes
//! show at once, and a query that reads the caller (`me`) runs whole.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{
    eventually_every, gql_at, ids, spawn_app, spawn_server, test_settings, VOTE_AS,
};

const PAGE: &str =
    "{ articles(order: SCORE, page: 1, pageSize: 25) { id title votes downvotes score groups myVote } }";

/// `myVote` by article id on a page's `articles`.
fn votes_of(page: &Value) -> HashMap<String, Value> {
    page["articles"]
        .as_array()
        .expect("a list of articles")
        .iter()
        .map(|a| (a["id"].as_str().unwrap().to_owned(), a["myVote"].clone()))
        .collect()
}

/// The page without `myVote`, to compare what readers share.
fn without_votes(page: &Value) -> Value {
    let mut page = page.clone();
    for article in page["articles"].as_array_mut().unwrap() {
        article.as_object_mut().unwrap().remove("myVote");
    }
    page
}

#[tokio::test]
async fn readers_share_one_page_and_each_sees_their_own_votes() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let carol = app.sign_up("carol").await;
    for i in 0..30 {
        app.post(&alice, &format!("article {i}"), &[]).await;
    }
    app.vote_as(&bob, "30", "UP").await;
    app.vote_as(&bob, "29", "DOWN").await;
    app.vote_as(&carol, "28", "DOWN").await;
    app.vote_as(&carol, "30", "DOWN").await;
    // dave's upvotes keep the downvoted articles on the first page.
    let dave = app.sign_up("dave").await;
    app.vote_as(&dave, "29", "UP").await;
    app.vote_as(&dave, "28", "UP").await;

    let bobs = app.gql_ok(PAGE, json!({}), Some(&bob)).await;
    let carols = app.gql_ok(PAGE, json!({}), Some(&carol)).await;
    let anonymous = app.gql_ok(PAGE, json!({}), None).await;
    assert_eq!(without_votes(&bobs), without_votes(&anonymous));
    assert_eq!(without_votes(&carols), without_votes(&anonymous));

    let (b, c) = (votes_of(&bobs), votes_of(&carols));
    assert_eq!(b.len(), 25);
    for (id, bob_wants, carol_wants) in [
        ("30", "UP", "DOWN"),
        ("29", "DOWN", "NONE"),
        ("28", "NONE", "DOWN"),
        ("27", "NONE", "NONE"),
    ] {
        assert_eq!(b[id], bob_wants, "bob's vote on {id}");
        assert_eq!(c[id], carol_wants, "carol's vote on {id}");
    }
    // alice posted them all: her own upvote on each.
    let alices = app.gql_ok(PAGE, json!({}), Some(&alice)).await;
    assert!(votes_of(&alices).values().all(|v| v == "UP"), "{alices}");
    assert!(votes_of(&anonymous).values().all(Value::is_null));
}

#[tokio::test]
async fn a_readers_vote_shows_on_their_next_page() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    for i in 0..5 {
        app.post(&alice, &format!("article {i}"), &[]).await;
    }
    let query = "{ articles(order: SCORE) { id votes downvotes myVote } article(id: \"2\") { votes myVote } }";
    let before = app.gql_ok(query, json!({}), Some(&bob)).await;
    assert_eq!(before["article"], json!({ "votes": 1, "myVote": "NONE" }));
    for (direction, votes, downvotes, mine) in [
        ("UP", 2, 0, "UP"),
        ("DOWN", 1, 1, "DOWN"),
        ("NONE", 1, 0, "NONE"),
    ] {
        app.vote_as(&bob, "2", direction).await;
        let page = app.gql_ok(query, json!({}), Some(&bob)).await;
        assert_eq!(
            page["article"],
            json!({ "votes": votes, "myVote": mine }),
            "after {direction}"
        );
        let listed = page["articles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == "2")
            .unwrap();
        assert_eq!(
            listed,
            &json!({ "id": "2", "votes": votes, "downvotes": downvotes, "myVote": mine }),
            "after {direction}"
        );
    }
}

#[tokio::test]
async fn a_query_that_reads_the_caller_runs_whole_for_each_reader() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "first", &[]).await;
    let query = "{ me { name } articles { id myVote } }";
    for _ in 0..2 {
        for (token, name, mine) in [(&alice, "alice", "UP"), (&bob, "bob", "NONE")] {
            let page = app.gql_ok(query, json!({}), Some(token)).await;
            assert_eq!(
                page,
                json!({ "me": { "name": name }, "articles": [{ "id": "1", "myVote": mine }] })
            );
        }
    }
    // A token nobody holds reads like no token: no caller, null votes.
    let page = app.gql_ok(query, json!({}), Some("not-a-token")).await;
    assert_eq!(
        page,
        json!({ "me": null, "articles": [{ "id": "1", "myVote": null }] })
    );
    let page = app
        .gql_ok("{ articles { id myVote } }", json!({}), Some("not-a-token"))
        .await;
    assert_eq!(page, json!({ "articles": [{ "id": "1", "myVote": null }] }));
}

#[tokio::test]
async fn a_vote_through_another_instance_reaches_a_logged_in_page_within_a_second() {
    let app = spawn_app().await;
    let other = spawn_server(test_settings(&app.redis)).await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "first", &[]).await;
    let query = "{ articles { id votes myVote } }";
    let page = app.gql_ok(query, json!({}), Some(&alice)).await;
    assert_eq!(page["articles"][0]["votes"], 1);

    let voted = gql_at(
        &app.client,
        &other.address,
        VOTE_AS,
        json!({ "id": "1", "d": "UP" }),
        Some(&bob),
        None,
    )
    .await;
    assert!(voted.get("errors").is_none(), "{voted}");
    let page = eventually_every(
        "bob's vote through the other instance to show",
        Duration::from_secs(2),
        Duration::from_millis(50),
        async || {
            let page = app.gql_ok(query, json!({}), Some(&alice)).await;
            if page["articles"][0]["votes"] == 2 {
                Ok(page)
            } else {
                Err(page)
            }
        },
    )
    .await;
    assert_eq!(page["articles"][0]["myVote"], "UP");
    // And bob, reading through this instance, sees his own vote.
    let page = app.gql_ok(query, json!({}), Some(&bob)).await;
    assert_eq!(page["articles"][0]["myVote"], "UP");
}

#[tokio::test]
async fn a_vote_drops_the_shared_page_and_the_next_read_is_computed_with_it() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let carol = app.sign_up("carol").await;
    for i in 0..5 {
        app.post(&alice, &format!("article {i}"), &[]).await;
    }
    let query = "{ articles(order: SCORE) { id votes downvotes score myVote } }";
    let fresh = "{ articles(order: SCORE) { id votes downvotes score } }";
    let first = app.gql_ok(query, json!({}), Some(&bob)).await;
    assert_eq!(ids(&first["articles"]), ["5", "4", "3", "2", "1"]);
    let evicted = |health: Value| health["responseCache"]["evictedByVotes"].as_u64().unwrap();
    let before = evicted(app.health().await);

    // A vote on an article of the page, even one that keeps its order.
    app.vote_as(&carol, "1", "DOWN").await;
    assert!(
        evicted(app.health().await) > before,
        "the logged-in page was dropped"
    );
    let page = app.gql_ok(query, json!({}), Some(&bob)).await;
    let one = &page["articles"][4];
    assert_eq!(
        (&one["id"], &one["votes"], &one["downvotes"]),
        (&json!("1"), &json!(1), &json!(1))
    );
    assert_eq!(one["myVote"], "NONE");
    // Exactly what a computation from Redis gives.
    let computed = app.gql_ok(fresh, json!({}), None).await;
    assert_eq!(without_votes(&page), computed);

    // carol's vote taken back reaches her own next page.
    app.vote_as(&carol, "1", "NONE").await;
    let page = app.gql_ok(query, json!({}), Some(&carol)).await;
    let one = &page["articles"][4];
    assert_eq!(
        (&one["votes"], &one["downvotes"], &one["myVote"]),
        (&json!(1), &json!(0), &json!("NONE"))
    );
    assert_eq!(
        without_votes(&page),
        app.gql_ok(fresh, json!({}), None).await
    );

    // A vote that reorders the page drops it: the next read is computed.
    let dropped = evicted(app.health().await);
    app.vote_as(&bob, "1", "UP").await;
    assert!(
        evicted(app.health().await) > dropped,
        "a reordering vote drops the page"
    );
    let page = app.gql_ok(query, json!({}), Some(&bob)).await;
    assert_eq!(ids(&page["articles"]), ["1", "5", "4", "3", "2"]);
    assert_eq!(page["articles"][0]["myVote"], "UP");
    assert_eq!(
        without_votes(&page),
        app.gql_ok(fresh, json!({}), None).await
    );
}
