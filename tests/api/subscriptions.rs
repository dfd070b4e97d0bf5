//! Live score updates over WebSocket, both protocols, from Redis pub/sub.

use std::time::Duration;

use redis::AsyncCommands;
use serde_json::{json, Value};

use crate::helpers::{
    done_if, eventually_every, health_at, kill_pubsub_connections, poll_until, spawn_app,
    spawn_app_with, spawn_server, test_settings, Subscriptions::AtLeast, Subscriptions::Exactly,
    TestApp, WsClient, LEGACY_WS, POLL, TRANSPORT_WS,
};

const SCORE_CHANGED: &str = "subscription($a: ID, $g: String) { scoreChanged(articleId: $a, group: $g) { score votes downvotes at article { id title myVote } } }";

async fn subscribed(app: &TestApp, protocol: &'static str, variables: Value) -> WsClient {
    let mut client = WsClient::connect(app, protocol).await;
    client.subscribe("1", SCORE_CHANGED, variables).await;
    app.wait_for_subscriptions(AtLeast(1), WITHIN).await;
    client
}

/// Subscribing is asynchronous: how long the server may take to count a
/// subscription (or to drop one).
const WITHIN: Duration = Duration::from_secs(2);

#[tokio::test]
async fn both_protocols_receive_score_changes() {
    for protocol in [TRANSPORT_WS, LEGACY_WS] {
        let app = spawn_app().await;
        let alice = app.sign_up("alice").await;
        let bob = app.sign_up("bob").await;
        let article = app.post(&alice, "live", &[]).await;
        let mut client = subscribed(&app, protocol, json!({})).await;

        app.vote(&bob, "1").await;
        let event = client.next_event().await["scoreChanged"].clone();
        assert_eq!(event["votes"], 2, "{protocol}: {event}");
        assert_eq!(event["downvotes"], 0);
        assert_eq!(
            event["score"].as_f64().unwrap(),
            article["score"].as_f64().unwrap() + 432.0
        );
        assert_eq!(event["article"]["id"], "1");
        assert_eq!(event["article"]["title"], "live");
        assert!(event["article"]["myVote"].is_null(), "anonymous subscriber");
        let at = chrono::DateTime::parse_from_rfc3339(event["at"].as_str().unwrap()).unwrap();
        assert!((chrono::Utc::now().timestamp() - at.timestamp()).abs() < 60);

        app.vote_as(&bob, "1", "DOWN").await;
        let event = client.next_event().await["scoreChanged"].clone();
        assert_eq!(
            (event["votes"].as_i64(), event["downvotes"].as_i64()),
            (Some(1), Some(1))
        );
        client.close().await;
    }
}

#[tokio::test]
async fn connection_init_carries_the_login() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "mine", &[]).await;
    let mut client = WsClient::connect_to(
        &app.address,
        TRANSPORT_WS,
        json!({ "Authorization": format!("Bearer {alice}") }),
    )
    .await;
    client.subscribe("s", SCORE_CHANGED, json!({})).await;
    app.wait_for_subscriptions(AtLeast(1), WITHIN).await;
    app.vote(&bob, "1").await;
    let event = client.next_event().await;
    assert_eq!(
        event["scoreChanged"]["article"]["myVote"], "UP",
        "alice's own upvote: {event}"
    );
}

#[tokio::test]
async fn filters_by_article_and_by_group() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "plain", &[]).await; // 1
    app.post(&alice, "rusty", &["rust"]).await; // 2
    app.post(&alice, "also rusty", &["rust", "news"]).await; // 3
    let mut by_article = WsClient::connect(&app, TRANSPORT_WS).await;
    by_article
        .subscribe("a", SCORE_CHANGED, json!({ "a": "3" }))
        .await;
    let mut by_group = WsClient::connect(&app, LEGACY_WS).await;
    by_group
        .subscribe("g", SCORE_CHANGED, json!({ "g": "rust" }))
        .await;
    let mut both = WsClient::connect(&app, TRANSPORT_WS).await;
    both.subscribe("b", SCORE_CHANGED, json!({ "a": "2", "g": "news" }))
        .await;
    app.wait_for_subscriptions(AtLeast(3), WITHIN).await;

    for id in ["1", "2", "3"] {
        app.vote(&bob, id).await;
    }
    assert_eq!(
        by_article.next_event().await["scoreChanged"]["article"]["id"],
        "3"
    );
    assert_eq!(
        by_group.next_event().await["scoreChanged"]["article"]["id"],
        "2"
    );
    assert_eq!(
        by_group.next_event().await["scoreChanged"]["article"]["id"],
        "3"
    );
    for client in [&mut by_article, &mut by_group, &mut both] {
        assert!(
            client.is_quiet(Duration::from_millis(300)).await,
            "no other event"
        );
    }

    let mut bad = WsClient::connect(&app, TRANSPORT_WS).await;
    bad.subscribe("x", SCORE_CHANGED, json!({ "g": "Not Valid" }))
        .await;
    // An execution error travels in a `next` payload, then the subscription completes.
    let error = bad.next_raw().await;
    assert_eq!(error["type"], "next", "{error}");
    assert_eq!(
        error["payload"]["errors"][0]["extensions"]["code"],
        "BAD_USER_INPUT"
    );
    assert_eq!(
        error["payload"]["errors"][0]["extensions"]["field"],
        "group"
    );
    assert_eq!(
        bad.next_raw().await,
        json!({ "id": "x", "type": "complete" })
    );
    bad.subscribe("y", "subscription { scoreChanged { nope } }", json!({}))
        .await;
    // async-graphql reports validation errors in a `next` payload too.
    let invalid = bad.next_raw().await;
    assert_eq!(invalid["type"], "next", "{invalid}");
    assert_eq!(
        invalid["payload"]["errors"][0]["extensions"]["code"],
        "GRAPHQL_VALIDATION_FAILED"
    );
}

#[tokio::test]
async fn events_follow_the_order_of_concurrent_votes() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "race", &[]).await;
    let tokens: Vec<String> = futures_util::future::join_all((0..60).map(|i| {
        let app = &app;
        async move { app.sign_up(&format!("racer{i}")).await }
    }))
    .await;
    let mut client = subscribed(&app, TRANSPORT_WS, json!({ "a": "1" })).await;
    futures_util::future::join_all(tokens.iter().map(|t| app.vote(t, "1"))).await;

    let mut seen = Vec::new();
    for _ in 0..60 {
        seen.push(
            client.next_event().await["scoreChanged"]["votes"]
                .as_i64()
                .unwrap(),
        );
    }
    assert_eq!(
        seen,
        (2..=61).collect::<Vec<_>>(),
        "one event per write, in write order"
    );
}

#[tokio::test]
async fn a_vote_on_one_instance_reaches_subscribers_of_another() {
    let app = spawn_app().await;
    let other = spawn_server(test_settings(&app.redis)).await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "shared", &[]).await;

    let mut client = WsClient::connect_to(&other.address, LEGACY_WS, json!({})).await;
    client.subscribe("1", SCORE_CHANGED, json!({})).await;
    // Each instance holds one events connection, however many subscribers.
    let mut extra = WsClient::connect_to(&other.address, TRANSPORT_WS, json!({})).await;
    extra.subscribe("2", SCORE_CHANGED, json!({})).await;
    // (Both waits go on either way: the events and the count below tell.)
    let mut redis = app.redis.conn().await;
    let _ = poll_until(Duration::from_secs(2), POLL, async || {
        numsub(&mut redis).await == 2
    })
    .await;
    // Both subscriptions are running on the other instance before the vote.
    let _ = poll_until(Duration::from_secs(5), POLL, async || {
        health_at(&app.client, &other.address).await["subscriptions"] == 2
    })
    .await;
    app.vote(&bob, "1").await;
    assert_eq!(client.next_event().await["scoreChanged"]["votes"], 2);
    assert_eq!(extra.next_event().await["scoreChanged"]["votes"], 2);
    let subs = numsub(&mut redis).await;
    assert_eq!(subs, 2, "two instances, one events connection each");
}

#[tokio::test]
async fn a_killed_pubsub_connection_is_replaced_and_subscribers_stay() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let carol = app.sign_up("carol").await;
    app.post(&alice, "resilient", &[]).await;
    let mut client = subscribed(&app, TRANSPORT_WS, json!({})).await;
    app.vote(&bob, "1").await;
    assert_eq!(client.next_event().await["scoreChanged"]["votes"], 2);

    let mut redis = app.redis.conn().await;
    // The events' connection and the deriver's keyspace notifications.
    assert_eq!(kill_pubsub_connections(&mut redis).await, 2);
    eventually_every(
        "the server to re-subscribe",
        Duration::from_secs(5),
        Duration::from_millis(50),
        async || {
            // The events' connection back (the deriver's reads no events).
            let subs = numsub(&mut redis).await;
            done_if(subs == 1, subs)
        },
    )
    .await;
    app.vote(&carol, "1").await;
    assert_eq!(client.next_event().await["scoreChanged"]["votes"], 3);
}

#[tokio::test]
async fn a_client_that_never_reads_does_not_hold_up_the_others() {
    // The stalled client reads at the end, so it must outlive the send
    // timeout that drops clients which never read (ws_protocol.rs tests that).
    let app = spawn_app_with(|s| s.ws_send_timeout_secs = 300).await;
    let alice = app.sign_up("alice").await;
    // Big articles make big events, so the stalled client's buffers fill.
    let long_title = "t".repeat(300);
    app.gql_ok(
        "mutation($t: String!, $l: String!) { post(title: $t, link: $l) { id } }",
        json!({ "t": long_title, "l": format!("https://e.com/{}", "l".repeat(2000)) }),
        Some(&alice),
    )
    .await;
    let heavy = "subscription { scoreChanged { votes article { title link } } }";
    let mut stalled = WsClient::connect(&app, TRANSPORT_WS).await;
    stalled.subscribe("s", heavy, json!({})).await;
    let mut reader = WsClient::connect(&app, LEGACY_WS).await;
    reader
        .subscribe("r", "subscription { scoreChanged { votes } }", json!({}))
        .await;
    app.wait_for_subscriptions(AtLeast(2), WITHIN).await;
    // Both run as shared streams, so the skipping below is their bounded
    // fan-out's (graphql/shared.rs), not the event hub's.
    assert_eq!(app.health().await["sharedSubscriptions"]["streams"], 2);

    // Publish as the vote script does, straight into Redis, in batches the
    // reader keeps up with; `votes` numbers the events.
    let mut redis = app.redis.conn().await;
    let (batches, batch) = (15, 1000);
    for b in 0..batches {
        let mut pipe = redis::pipe();
        for i in 0..batch {
            let n = b * batch + i;
            let event = json!({ "id": "1", "score": "1", "votes": n, "downvotes": 0, "at": "1.0", "groups": {} });
            pipe.cmd("PUBLISH")
                .arg("votegraph:score-changed")
                .arg(event.to_string())
                .ignore();
        }
        let () = pipe.query_async(&mut redis).await.unwrap();
        for i in 0..batch {
            let got = reader.next_event().await["scoreChanged"]["votes"]
                .as_i64()
                .unwrap();
            assert_eq!(
                got,
                (b * batch + i) as i64,
                "the reader gets every event in order"
            );
        }
    }
    let total = (batches * batch) as i64;
    // The server still answers, and the stalled client, once it reads, has
    // skipped what it could not take rather than buffering everything.
    assert_eq!(
        app.gql_ok("{ articleCount }", json!({}), None).await["articleCount"],
        1
    );
    let mut received = 0;
    let mut last = -1;
    while last != total - 1 {
        last = stalled.next_event().await["scoreChanged"]["votes"]
            .as_i64()
            .unwrap();
        received += 1;
    }
    assert!(
        received < total,
        "the stalled client skipped events ({received} of {total})"
    );
    let _: i64 = redis
        .publish("votegraph:score-changed", "not json")
        .await
        .unwrap();
    assert_eq!(
        app.gql_ok("{ articleCount }", json!({}), None).await["articleCount"],
        1
    );
}

#[tokio::test]
async fn closing_a_client_frees_its_subscription() {
    let app = spawn_app().await;
    let mut clients = Vec::new();
    for protocol in [TRANSPORT_WS, LEGACY_WS, TRANSPORT_WS] {
        let mut client = WsClient::connect(&app, protocol).await;
        client.subscribe("1", SCORE_CHANGED, json!({})).await;
        clients.push(client);
    }
    app.wait_for_subscriptions(AtLeast(3), WITHIN).await;
    assert_eq!(app.subscriptions().await, 3);
    for client in clients.drain(..2) {
        client.close().await;
    }
    // Closed clients' subscriptions are dropped.
    app.wait_for_subscriptions(Exactly(1), WITHIN).await;
}

/// Redis' count of subscribers to the score channel (server processes,
/// not WebSocket clients).
async fn numsub(redis: &mut redis::aio::MultiplexedConnection) -> i64 {
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("votegraph:score-changed")
        .query_async(redis)
        .await
        .unwrap();
    n
}

#[tokio::test]
async fn idle_sockets_get_keep_alives_in_each_protocol() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;

    let app = spawn_app_with(|s| s.ws_keepalive_secs = 1).await;
    for (protocol, expect_ka_text) in [(LEGACY_WS, true), (TRANSPORT_WS, false)] {
        let mut client = WsClient::open(&app.address, protocol).await;
        // Nothing is sent by the client, so the first frame is a keep-alive.
        let frame = tokio::time::timeout(Duration::from_secs(5), client.socket.next())
            .await
            .unwrap_or_else(|_| panic!("{protocol}: no keep-alive within 5 s"))
            .expect("open socket")
            .expect("frame");
        match frame {
            Message::Text(text) if expect_ka_text => assert_eq!(text.as_str(), r#"{"type":"ka"}"#),
            Message::Ping(_) if !expect_ka_text => {}
            other => panic!("{protocol}: unexpected {other:?}"),
        }
    }
}
