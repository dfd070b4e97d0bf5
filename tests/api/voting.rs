//! Up, down, switch and retract, checked after every transition.

use std::collections::HashMap;

use redis::AsyncCommands;
use serde_json::{json, Value};

use crate::helpers::{error_code, now, spawn_app, TestApp, ARTICLE_FIELDS};

const VOTE: &str = "mutation($id: ID!, $d: VoteDirection!) { vote(articleId: $id, direction: $d) { votes downvotes score myVote poster { karma } } }";

async fn vote_dir(app: &TestApp, token: &str, id: &str, direction: &str) -> Value {
    app.gql(VOTE, json!({ "id": id, "d": direction }), Some(token))
        .await
}

#[tokio::test]
async fn every_transition_keeps_votes_score_and_karma_consistent() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let article = app.post(&alice, "transitions", &[]).await;
    let id = article["id"].as_str().unwrap().to_owned();
    let time = article["score"].as_f64().unwrap() - 432.0;
    let mut redis = app.redis.conn().await;

    // (voter, direction, expected votes, downvotes, voter's own vote after)
    let steps = [
        (&bob, "UP", 2, 0, "UP"),
        (&bob, "UP", 2, 0, "UP"),
        (&bob, "DOWN", 1, 1, "DOWN"),
        (&bob, "DOWN", 1, 1, "DOWN"),
        (&bob, "UP", 2, 0, "UP"),
        (&bob, "NONE", 1, 0, "NONE"),
        (&bob, "DOWN", 1, 1, "DOWN"),
        (&bob, "NONE", 1, 0, "NONE"),
        (&bob, "NONE", 1, 0, "NONE"),
        // The poster's automatic upvote follows the same rules.
        (&alice, "DOWN", 0, 1, "DOWN"),
        (&alice, "NONE", 0, 0, "NONE"),
        (&alice, "UP", 1, 0, "UP"),
    ];
    for (i, (token, direction, votes, downvotes, mine)) in steps.into_iter().enumerate() {
        let body = vote_dir(&app, token, &id, direction).await;
        let got = &body["data"]["vote"];
        assert_eq!(got["votes"], votes, "step {i} {direction}: {body}");
        assert_eq!(got["downvotes"], downvotes, "step {i}");
        assert_eq!(got["myVote"], mine, "step {i}");
        assert_eq!(
            got["score"].as_f64().unwrap(),
            time + 432.0 * (votes - downvotes) as f64,
            "step {i}"
        );
        assert_eq!(got["poster"]["karma"], votes - downvotes, "step {i}: karma");

        let up: i64 = redis.scard(format!("voted:{id}")).await.unwrap();
        let down: i64 = redis.scard(format!("downvoted:{id}")).await.unwrap();
        assert_eq!(
            (up, down),
            (votes, downvotes),
            "step {i}: the sets match the counts"
        );
        let stored: f64 = redis
            .zscore("score:", format!("article:{id}"))
            .await
            .unwrap();
        assert_eq!(stored, time + 432.0 * (votes - downvotes) as f64);
    }
    let ttl: i64 = redis.ttl(format!("downvoted:{id}")).await.unwrap_or(-2);
    assert!(
        ttl == -2 || ttl > 6 * 86_400,
        "downvoted set expires with the window: {ttl}"
    );
}

#[tokio::test]
async fn after_a_week_every_direction_is_closed() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let id = app.post(&alice, "old", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    vote_dir(&app, &bob, &id, "DOWN").await;
    let mut redis = app.redis.conn().await;
    let old = now() - 8.0 * 86_400.0;
    let _: () = redis
        .zadd("time:", format!("article:{id}"), old)
        .await
        .unwrap();
    let before: HashMap<String, String> = redis.hgetall(format!("article:{id}")).await.unwrap();
    let score: f64 = redis
        .zscore("score:", format!("article:{id}"))
        .await
        .unwrap();

    for direction in ["UP", "DOWN", "NONE"] {
        for token in [&alice, &bob] {
            let body = vote_dir(&app, token, &id, direction).await;
            assert_eq!(error_code(&body), "VOTING_CLOSED", "{direction}: {body}");
        }
    }
    let after: HashMap<String, String> = redis.hgetall(format!("article:{id}")).await.unwrap();
    assert_eq!(before, after);
    assert_eq!(
        redis
            .zscore::<_, _, f64>("score:", format!("article:{id}"))
            .await
            .unwrap(),
        score
    );
}

#[tokio::test]
async fn concurrent_flipping_ends_with_counts_equal_to_the_sets() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let article = app.post(&alice, "contested", &["hot"]).await;
    let id = article["id"].as_str().unwrap().to_owned();
    let time = article["score"].as_f64().unwrap() - 432.0;

    let tokens: Vec<String> = futures_util::future::join_all((0..100).map(|i| {
        let app = &app;
        async move { app.sign_up(&format!("flipper{i}")).await }
    }))
    .await;
    // Each user flips 8 times in sequence; all users at once. The last
    // direction depends on the user: up, down, or retracted.
    let finals = futures_util::future::join_all(tokens.iter().enumerate().map(|(i, token)| {
        let (app, id) = (&app, &id);
        async move {
            let pattern = ["UP", "DOWN", "NONE", "DOWN", "UP", "UP", "NONE", "DOWN"];
            let last = match i % 3 {
                0 => "UP",
                1 => "DOWN",
                _ => "NONE",
            };
            for direction in pattern.iter().chain(std::iter::once(&last)) {
                let body = vote_dir(app, token, id, direction).await;
                assert!(body.get("errors").is_none(), "{body}");
            }
            last
        }
    }))
    .await;
    let ups = 1 + finals.iter().filter(|d| **d == "UP").count() as i64;
    let downs = finals.iter().filter(|d| **d == "DOWN").count() as i64;

    let data = app
        .gql_ok(
            "query($id: ID!) { article(id: $id) { votes downvotes score poster { karma } } group(name: \"hot\") { articles { score } } }",
            json!({ "id": id }),
            None,
        )
        .await;
    assert_eq!(data["article"]["votes"], ups);
    assert_eq!(data["article"]["downvotes"], downs);
    assert_eq!(
        data["article"]["score"].as_f64().unwrap(),
        time + 432.0 * (ups - downs) as f64
    );
    assert_eq!(data["article"]["poster"]["karma"], ups - downs);
    assert_eq!(
        data["group"]["articles"][0]["score"],
        data["article"]["score"]
    );
    let mut redis = app.redis.conn().await;
    assert_eq!(
        redis.scard::<_, i64>(format!("voted:{id}")).await.unwrap(),
        ups
    );
    assert_eq!(
        redis
            .scard::<_, i64>(format!("downvoted:{id}"))
            .await
            .unwrap(),
        downs
    );
}

#[tokio::test]
async fn my_vote_is_null_when_anonymous_and_batched_when_logged_in() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    for i in 0..30 {
        app.post(&alice, &format!("a{i}"), &[]).await;
    }
    vote_dir(&app, &bob, "30", "DOWN").await;
    vote_dir(&app, &bob, "29", "UP").await;
    let query =
        format!("{{ articles(order: NEWEST) {{ {ARTICLE_FIELDS} downvotes myVote slug views }} }}");

    let anonymous = app.gql_ok(&query, json!({}), None).await;
    assert!(anonymous["articles"][0]["myVote"].is_null());
    let mine = app.gql_ok(&query, json!({}), Some(&bob)).await;
    let votes: Vec<&str> = mine["articles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["myVote"].as_str().unwrap())
        .collect();
    assert_eq!(&votes[..3], ["DOWN", "UP", "NONE"]);
    assert_eq!(
        app.gql_ok(&query, json!({}), Some(&alice)).await["articles"][2]["myVote"],
        "UP"
    );
}
