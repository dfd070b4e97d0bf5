//! Subscriptions that cannot depend on the caller run once per distinct
//! document and variables and are shared, as `/health` counts them.

use std::time::Duration;

use serde_json::{json, Value};
use votegraph::config::Settings;

use crate::helpers::{
    done_if, eventually, spawn_app_with, TestApp, WsClient, LEGACY_WS, TRANSPORT_WS,
};

/// Reads the article (one HMGET) whenever it runs.
const WITH_TITLE: &str = "subscription { scoreChanged { votes article { title } } }";

/// Room for the many WebSocket clients of these tests (every test client
/// is 127.0.0.1).
fn many_clients(settings: &mut Settings) {
    settings.ws_max_connections_per_client = 100;
}

async fn shared(app: &TestApp) -> Value {
    app.health().await["sharedSubscriptions"].clone()
}

/// Waits (5 s at most) for `subscriptions` client subscriptions, `streams`
/// shared streams and `members` subscribers of shared streams.
async fn wait_for(app: &TestApp, subscriptions: u64, streams: u64, members: u64) {
    let what = format!("{subscriptions} subscriptions, {streams} shared streams of {members}");
    eventually(&what, Duration::from_secs(5), async || {
        let h = app.health().await;
        done_if(
            h["subscriptions"] == subscriptions
                && h["sharedSubscriptions"]["streams"] == streams
                && h["sharedSubscriptions"]["subscribers"] == members,
            h,
        )
    })
    .await;
}

async fn sign_up_voters(app: &TestApp, n: usize) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("voter{i}")).collect();
    futures_util::future::join_all(names.iter().map(|name| app.sign_up(name))).await
}

#[tokio::test]
async fn many_subscribers_of_one_document_share_one_execution_per_event() {
    let app = spawn_app_with(many_clients).await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "shared title", &[]).await;
    let voters = sign_up_voters(&app, 4).await;
    app.vote_as(&voters[0], "1", "UP").await;

    let mut clients = Vec::new();
    for i in 0..50 {
        let protocol = if i % 2 == 0 { TRANSPORT_WS } else { LEGACY_WS };
        let mut client = WsClient::connect(&app, protocol).await;
        client.subscribe("s", WITH_TITLE, json!({})).await;
        clients.push(client);
    }
    wait_for(&app, 50, 1, 50).await;
    assert_eq!(shared(&app).await["largest"], json!([50]));

    for (n, voter) in voters[1..].iter().enumerate() {
        app.vote_as(voter, "1", "UP").await;
        for client in &mut clients {
            let event = client.next_event().await["scoreChanged"].clone();
            assert_eq!(event["votes"], n as i64 + 3, "{event}");
            assert_eq!(event["article"]["title"], "shared title");
        }
    }
}

#[tokio::test]
async fn my_vote_subscriptions_are_not_shared() {
    let app = spawn_app_with(many_clients).await;
    let carol = app.sign_up("carol").await;
    app.post(&carol, "whose vote", &[]).await;
    let query = "subscription { scoreChanged { votes article { myVote } } }";
    let mut subscribers = Vec::new();
    for name in ["alice", "bob"] {
        let token = app.sign_up(name).await;
        let mut client = WsClient::connect_to(
            &app.address,
            TRANSPORT_WS,
            json!({ "Authorization": format!("Bearer {token}") }),
        )
        .await;
        client.subscribe("mine", query, json!({})).await;
        subscribers.push((token, client));
    }
    wait_for(&app, 2, 0, 0).await;

    app.vote_as(&subscribers[0].0, "1", "UP").await;
    let mut seen = Vec::new();
    for (_, client) in &mut subscribers {
        seen.push(client.next_event().await["scoreChanged"]["article"]["myVote"].clone());
    }
    assert_eq!(
        seen,
        [json!("UP"), json!("NONE")],
        "each sees their own vote"
    );
    app.vote_as(&subscribers[1].0, "1", "DOWN").await;
    let mut seen = Vec::new();
    for (_, client) in &mut subscribers {
        seen.push(client.next_event().await["scoreChanged"]["article"]["myVote"].clone());
    }
    assert_eq!(seen, [json!("UP"), json!("DOWN")]);
    assert_eq!(shared(&app).await["streams"], 0);
}

#[tokio::test]
async fn variables_tell_streams_apart_and_both_protocols_share_one() {
    let app = spawn_app_with(many_clients).await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "one", &[]).await;
    app.post(&alice, "two", &[]).await;
    let query = "subscription($a: ID) { scoreChanged(articleId: $a) { votes article { id } } }";
    let mut transport = WsClient::connect(&app, TRANSPORT_WS).await;
    transport.subscribe("t", query, json!({ "a": "1" })).await;
    let mut legacy = WsClient::connect(&app, LEGACY_WS).await;
    legacy.subscribe("l", query, json!({ "a": "1" })).await;
    let mut other = WsClient::connect(&app, TRANSPORT_WS).await;
    other.subscribe("o", query, json!({ "a": "2" })).await;
    wait_for(&app, 3, 2, 3).await;
    assert_eq!(shared(&app).await["largest"], json!([2, 1]));

    app.vote_as(&bob, "1", "UP").await;
    let frame = transport.next_raw().await;
    assert_eq!(
        frame,
        json!({ "id": "t", "type": "next", "payload": { "data": { "scoreChanged": { "votes": 2, "article": { "id": "1" } } } } })
    );
    let frame = legacy.next_raw().await;
    assert_eq!(
        frame,
        json!({ "id": "l", "type": "data", "payload": { "data": { "scoreChanged": { "votes": 2, "article": { "id": "1" } } } } })
    );
    assert!(other.is_quiet(Duration::from_millis(300)).await);
    app.vote_as(&bob, "2", "UP").await;
    assert_eq!(
        other.next_event().await["scoreChanged"]["article"]["id"],
        "2"
    );
    for client in [&mut transport, &mut legacy] {
        assert!(client.is_quiet(Duration::from_millis(300)).await);
    }
}

#[tokio::test]
async fn a_shared_stream_goes_with_its_last_subscriber() {
    let app = spawn_app_with(many_clients).await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "short-lived", &[]).await;
    let mut first = WsClient::connect(&app, TRANSPORT_WS).await;
    first.subscribe("a", WITH_TITLE, json!({})).await;
    let mut second = WsClient::connect(&app, LEGACY_WS).await;
    second.subscribe("b", WITH_TITLE, json!({})).await;
    wait_for(&app, 2, 1, 2).await;

    // One completes: the stream stays for the other.
    first.complete("a").await;
    wait_for(&app, 1, 1, 1).await;
    app.vote_as(&bob, "1", "UP").await;
    assert_eq!(second.next_event().await["scoreChanged"]["votes"], 2);
    assert!(first.is_quiet(Duration::from_millis(300)).await);
    // The other disconnects: the stream and its entry go.
    second.close().await;
    wait_for(&app, 0, 0, 0).await;

    // The same document again starts a new stream, which works.
    first.subscribe("c", WITH_TITLE, json!({})).await;
    wait_for(&app, 1, 1, 1).await;
    app.vote_as(&bob, "1", "DOWN").await;
    assert_eq!(first.next_event().await["scoreChanged"]["votes"], 1);

    // An operation that fails to start ends its stream; each subscriber
    // that comes later runs it afresh and sees the error.
    let invalid = "subscription { scoreChanged(group: \"Not Valid\") { votes } }";
    for id in ["x", "y"] {
        first.subscribe(id, invalid, json!({})).await;
        let error = first.next_raw().await;
        assert_eq!(error["id"], id, "{error}");
        assert_eq!(
            error["payload"]["errors"][0]["extensions"]["code"],
            "BAD_USER_INPUT"
        );
        assert_eq!(
            first.next_raw().await,
            json!({ "id": id, "type": "complete" })
        );
    }
    wait_for(&app, 1, 1, 1).await;
}

#[tokio::test]
async fn distinct_shared_streams_are_bounded() {
    let app = spawn_app_with(|s| {
        many_clients(s);
        s.ws_max_shared_streams = 1;
    })
    .await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "bounded", &[]).await;
    let voters = sign_up_voters(&app, 3).await;
    app.vote_as(&voters[0], "1", "UP").await;

    // The one shared stream, then two subscribers of another document:
    // past the bound, each runs its own.
    let mut holder = WsClient::connect(&app, TRANSPORT_WS).await;
    holder
        .subscribe("h", "subscription { scoreChanged { votes } }", json!({}))
        .await;
    wait_for(&app, 1, 1, 1).await;
    let mut unshared = Vec::new();
    for _ in 0..2 {
        let mut client = WsClient::connect(&app, TRANSPORT_WS).await;
        client.subscribe("u", WITH_TITLE, json!({})).await;
        unshared.push(client);
    }
    wait_for(&app, 3, 1, 1).await;
    assert_eq!(shared(&app).await["unsharedAtLimit"], 2);
    app.vote_as(&voters[1], "1", "UP").await;
    for client in &mut unshared {
        assert_eq!(client.next_event().await["scoreChanged"]["votes"], 3);
    }

    // Once the holder leaves, the document gets the free slot.
    holder.close().await;
    for client in unshared.drain(..) {
        client.close().await;
    }
    wait_for(&app, 0, 0, 0).await;
    let mut sharing = Vec::new();
    for _ in 0..2 {
        let mut client = WsClient::connect(&app, LEGACY_WS).await;
        client.subscribe("s", WITH_TITLE, json!({})).await;
        sharing.push(client);
    }
    wait_for(&app, 2, 1, 2).await;
    app.vote_as(&voters[2], "1", "UP").await;
    for client in &mut sharing {
        assert_eq!(client.next_event().await["scoreChanged"]["votes"], 4);
    }
}

#[tokio::test]
async fn an_error_an_event_yields_is_shared_like_its_data() {
    let app = spawn_app_with(many_clients).await;
    let mut clients = Vec::new();
    for protocol in [TRANSPORT_WS, LEGACY_WS] {
        let mut client = WsClient::connect(&app, protocol).await;
        client.subscribe("s", WITH_TITLE, json!({})).await;
        clients.push(client);
    }
    wait_for(&app, 2, 1, 2).await;
    // An event for an article that does not exist (any more), published
    // as the vote script would.
    let event =
        json!({ "id": "999", "score": "1", "votes": 1, "downvotes": 0, "at": "1.0", "groups": {} });
    let _: i64 = redis::AsyncCommands::publish(
        &mut app.redis.conn().await,
        "votegraph:score-changed",
        event.to_string(),
    )
    .await
    .unwrap();
    let mut payloads = Vec::new();
    for client in &mut clients {
        let message = client.next_raw().await;
        assert_eq!(message["id"], "s", "{message}");
        payloads.push(message["payload"].clone());
    }
    assert_eq!(payloads[0], payloads[1], "the same response for both");
    let error = &payloads[0]["errors"][0];
    assert_eq!(error["extensions"]["code"], "NOT_FOUND", "{error}");
    assert_eq!(
        payloads[0]["data"],
        json!({ "scoreChanged": { "votes": 1 } }),
        "async-graphql leaves the failed field out"
    );
    // The stream goes on.
    assert_eq!(shared(&app).await["streams"], 1);
}

#[tokio::test]
async fn documents_that_differ_only_in_how_they_are_written_share_one_stream() {
    let app = spawn_app_with(|s| s.ws_max_connections_per_client = 110).await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "one stream", &[]).await;
    let voters = sign_up_voters(&app, 2).await;
    app.vote_as(&voters[0], "1", "UP").await;
    let mut clients = Vec::new();
    for i in 0..100 {
        // A comment of its own, and the layout, argument order and
        // fragments varied: one meaning.
        let document = match i % 4 {
            0 => format!("# client {i}\nsubscription {{ scoreChanged(articleId: \"1\", group: null) {{ votes article {{ title }} }} }}"),
            1 => format!("subscription{{scoreChanged(group:null,articleId:\"1\"){{votes,article{{title}}}}}} # {i}"),
            2 => format!("subscription {{\n  scoreChanged(\n    group: null\n    articleId: \"1\" # {i}\n  ) {{ votes article {{ title }} }}\n}}"),
            _ => format!("subscription {{ scoreChanged(articleId: \"1\", group: null) {{ votes article {{ title }} }} }}\n# {i} {}", "·".repeat(i)),
        };
        let protocol = if i % 2 == 0 { TRANSPORT_WS } else { LEGACY_WS };
        let mut client = WsClient::connect(&app, protocol).await;
        client.subscribe("s", &document, json!({})).await;
        clients.push(client);
    }
    wait_for(&app, 100, 1, 100).await;
    assert_eq!(shared(&app).await["largest"], json!([100]));
    app.vote_as(&voters[1], "1", "UP").await;
    for client in &mut clients {
        let event = client.next_event().await["scoreChanged"].clone();
        assert_eq!(event["votes"], 3, "{event}");
        assert_eq!(event["article"]["title"], "one stream");
    }
    // A different selection is a different stream.
    let mut other = WsClient::connect(&app, TRANSPORT_WS).await;
    other
        .subscribe(
            "s",
            "subscription { scoreChanged(articleId: \"1\", group: null) { article { title } votes } }",
            json!({}),
        )
        .await;
    wait_for(&app, 101, 2, 101).await;
}
