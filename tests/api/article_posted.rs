//! `Subscription.articlePosted`: new posts over both WebSocket protocols,
//! the group filter, and posts through another instance, all through each
//! process' one pub/sub connection.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{
    error_code, spawn_app, spawn_server, test_settings, wait_for_subscriptions_at,
    Subscriptions::Exactly, WsClient, LEGACY_WS, TRANSPORT_WS,
};

const POSTED: &str =
    "subscription($g: String) { articlePosted(group: $g) { id title groups votes poster { name } myVote } }";

/// How long a subscription may take to start.
const WITHIN: Duration = Duration::from_secs(5);

fn posted(event: &Value) -> &Value {
    &event["articlePosted"]
}

#[tokio::test]
async fn both_protocols_receive_new_posts_and_the_group_filter_holds() {
    for protocol in [TRANSPORT_WS, LEGACY_WS] {
        let app = spawn_app().await;
        let alice = app.sign_up("alice").await;
        let mut all = WsClient::connect(&app, protocol).await;
        all.subscribe("1", POSTED, json!({})).await;
        let mut rust = WsClient::connect(&app, protocol).await;
        rust.subscribe("1", POSTED, json!({ "g": "rust" })).await;
        app.wait_for_subscriptions(Exactly(2), WITHIN).await;

        app.post(&alice, "plain", &[]).await;
        app.post(&alice, "crab", &["rust", "news"]).await;
        let first = all.next_event().await;
        assert_eq!(
            posted(&first),
            &json!({ "id": "1", "title": "plain", "groups": [], "votes": 1, "poster": { "name": "alice" }, "myVote": null }),
            "{protocol}"
        );
        let second = all.next_event().await;
        assert_eq!(posted(&second)["id"], "2", "{protocol}");
        assert_eq!(posted(&second)["groups"], json!(["news", "rust"]));
        // The group's subscriber sees only the post in its group.
        let only = rust.next_event().await;
        assert_eq!(posted(&only)["id"], "2", "{protocol}: {only}");
        // Adding an article to the group later is not a new post.
        app.gql_ok(
            "mutation { setGroups(articleId: \"1\", add: [\"rust\"]) { id } }",
            json!({}),
            Some(&alice),
        )
        .await;
        app.post(&alice, "third", &["rust"]).await;
        assert_eq!(posted(&rust.next_event().await)["id"], "3", "{protocol}");
        all.close().await;
        rust.close().await;
    }
}

#[tokio::test]
async fn a_post_through_one_instance_reaches_subscribers_of_another() {
    let app = spawn_app().await;
    let other = spawn_server(test_settings(&app.redis)).await;
    let alice = app.sign_up("alice").await;
    let mut client = WsClient::connect_to(&other.address, TRANSPORT_WS, json!({})).await;
    client.subscribe("1", POSTED, json!({})).await;
    let mut scores = WsClient::connect_to(&other.address, LEGACY_WS, json!({})).await;
    scores
        .subscribe("1", "subscription { scoreChanged { votes } }", json!({}))
        .await;
    wait_for_subscriptions_at(&app.client, &other.address, Exactly(2), WITHIN).await;
    app.post(&alice, "far away", &[]).await;
    assert_eq!(posted(&client.next_event().await)["title"], "far away");
    // One pub/sub connection per process carries both kinds of events.
    let mut redis = app.redis.conn().await;
    let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("votegraph:score-changed")
        .arg("votegraph:article-posted")
        .query_async(&mut redis)
        .await
        .map(|flat: Vec<redis::Value>| {
            flat.chunks(2)
                .map(|pair| {
                    (
                        redis::from_redis_value(pair[0].clone()).unwrap(),
                        redis::from_redis_value(pair[1].clone()).unwrap(),
                    )
                })
                .collect()
        })
        .unwrap();
    assert_eq!(
        counts,
        [
            ("votegraph:score-changed".to_owned(), 2),
            ("votegraph:article-posted".to_owned(), 2)
        ],
        "two instances, one events connection each"
    );
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut redis)
        .await
        .unwrap();
    // Per instance: the events' connection and the deriver's keyspace
    // notifications (see `src/store/deriver.rs`).
    assert_eq!(clients.lines().count(), 4, "{clients}");
}

#[tokio::test]
async fn a_bad_group_is_bad_user_input() {
    let app = spawn_app().await;
    let mut client = WsClient::connect(&app, TRANSPORT_WS).await;
    client
        .subscribe("1", POSTED, json!({ "g": "Not A Group!" }))
        .await;
    let error = client.next_raw().await;
    assert_eq!(error["type"], "next", "{error}");
    assert_eq!(error_code(&error["payload"]), "BAD_USER_INPUT", "{error}");
    assert_eq!(
        error["payload"]["errors"][0]["extensions"]["field"],
        "group"
    );
    assert_eq!(
        client.next_raw().await,
        json!({ "id": "1", "type": "complete" })
    );
}
