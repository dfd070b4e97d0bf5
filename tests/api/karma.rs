//! The karma leaderboard, ties broken by who reached the karma first.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{error_code, ids, spawn_app};

const TOP: &str =
    "query($n: Int!) { topPosters(limit: $n) { rank karma user { name karma rank } } }";

fn names(data: &serde_json::Value) -> Vec<(String, i64)> {
    data["topPosters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["user"]["name"].as_str().unwrap().to_owned(),
                r["karma"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_leaderboard_orders_by_karma_then_by_who_got_there_first() {
    let app = spawn_app().await;
    let zed = app.sign_up("zed").await; // sorts last by name: ties are not by name
    let amy = app.sign_up("amy").await;
    let voter1 = app.sign_up("voter1").await;
    let voter2 = app.sign_up("voter2").await;

    // Both reach karma 1 by posting; zed a second earlier.
    let z = app.post(&zed, "zed's", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let a = app.post(&amy, "amy's", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let top = app.gql_ok(TOP, json!({ "n": 10 }), None).await;
    assert_eq!(names(&top), [("zed".into(), 1), ("amy".into(), 1)]);
    assert_eq!(top["topPosters"][0]["rank"], 1);
    assert_eq!(top["topPosters"][1]["user"]["rank"], 2);

    // amy reaches 2 first, then zed: amy leads the tie at 2.
    app.vote(&voter1, &a).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    app.vote(&voter1, &z).await;
    assert_eq!(
        names(&app.gql_ok(TOP, json!({ "n": 10 }), None).await),
        [("amy".into(), 2), ("zed".into(), 2)]
    );

    // A downvote drops amy below zed; karma can go negative.
    app.vote_as(&voter2, &a, "DOWN").await;
    assert_eq!(
        names(&app.gql_ok(TOP, json!({ "n": 1 }), None).await),
        [("zed".into(), 2)]
    );
    app.vote_as(&voter1, &a, "NONE").await;
    app.vote_as(&amy, &a, "DOWN").await;
    let top = app.gql_ok(TOP, json!({ "n": 10 }), None).await;
    assert_eq!(names(&top), [("zed".into(), 2), ("amy".into(), -2)]);
}

#[tokio::test]
async fn users_show_karma_rank_and_their_articles() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let a1 = app.post(&alice, "one", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let a2 = app.post(&alice, "two", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.post(&bob, "bob's", &[]).await;
    app.vote(&bob, &a1).await;

    let q = "{ me { name karma rank articles { id } newest: articles(order: NEWEST, pageSize: 1) { id } } }";
    let me = app.gql_ok(q, json!({}), Some(&alice)).await["me"].clone();
    assert_eq!(me["karma"], 3);
    assert_eq!(me["rank"], 1);
    assert_eq!(ids(&me["articles"]), vec![a1.clone(), a2.clone()]);
    assert_eq!(ids(&me["newest"]), vec![a2]);
    let me = app.gql_ok(q, json!({}), Some(&bob)).await["me"].clone();
    assert_eq!(
        (me["karma"].as_i64(), me["rank"].as_i64()),
        (Some(1), Some(2))
    );

    // A user nobody voted for has no rank; the poster field resolves too.
    let carol = app.sign_up("carol").await;
    let me = app.gql_ok(q, json!({}), Some(&carol)).await["me"].clone();
    assert_eq!(me["karma"], 0);
    assert!(me["rank"].is_null());
    let data = app
        .gql_ok("{ articles { poster { name karma } } }", json!({}), None)
        .await;
    assert_eq!(
        data["articles"][0]["poster"],
        json!({ "name": "alice", "karma": 3 })
    );

    for n in [0, 101] {
        let body = app.gql(TOP, json!({ "n": n }), None).await;
        assert_eq!(error_code(&body), "BAD_USER_INPUT");
        assert_eq!(body["errors"][0]["extensions"]["field"], "limit");
    }
}
