//! The WebSocket protocol's strict edges: close codes, limits, slow readers
//! and shutdown, against the real server and a real Redis.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio_tungstenite::MaybeTlsStream;

use crate::helpers::{
    done_if, eventually, spawn_app, spawn_app_with, spawn_server_until, test_settings, ws_request,
    Subscriptions::Exactly, TestApp, TestRedis, WsClient, LEGACY_WS, TRANSPORT_WS,
};

const SCORE_CHANGED: &str = "subscription { scoreChanged { votes } }";

/// How long a subscription may take to start or end.
const WITHIN: Duration = Duration::from_secs(5);

#[tokio::test]
async fn no_connection_init_in_time_closes_4408() {
    let app = spawn_app_with(|s| s.ws_init_timeout_secs = 1).await;
    let mut transport = WsClient::open(&app.address, TRANSPORT_WS).await;
    let mut legacy = WsClient::open(&app.address, LEGACY_WS).await;
    let reason = transport.expect_close(4408).await;
    assert_eq!(reason, "Connection initialisation timeout");
    assert_eq!(
        legacy.expect_connection_error(4408).await,
        "connection initialisation timeout"
    );
    // In time, the connection lives on past the timeout.
    let mut ok = WsClient::connect(&app, TRANSPORT_WS).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ok.send(json!({ "type": "ping" })).await;
    assert_eq!(ok.next_raw().await, json!({ "type": "pong" }));
}

#[tokio::test]
async fn an_invalid_or_expired_token_closes_4403() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let revoked = app.sign_up("bob").await;
    app.gql_ok("mutation { logOut }", json!({}), Some(&revoked))
        .await;

    for auth in [
        "Bearer not-a-token".to_owned(),
        format!("Bearer {revoked}"),
        format!("Basic {alice}"),
    ] {
        let mut client = WsClient::open(&app.address, TRANSPORT_WS).await;
        client
            .send(json!({ "type": "connection_init", "payload": { "Authorization": auth } }))
            .await;
        assert_eq!(client.expect_close(4403).await, "Forbidden", "{auth}");

        let mut legacy = WsClient::open(&app.address, LEGACY_WS).await;
        legacy
            .send(json!({ "type": "connection_init", "payload": { "authorization": auth } }))
            .await;
        let message = legacy.expect_connection_error(4403).await;
        assert!(!message.contains(&alice), "no token echoed: {message}");
    }

    // The upgrade's own Authorization header is checked the same way.
    let mut request = ws_request(&app.address, TRANSPORT_WS);
    request
        .headers_mut()
        .insert("authorization", "Bearer nope".parse().unwrap());
    let (socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let mut client = WsClient::over(socket, TRANSPORT_WS);
    client
        .send(json!({ "type": "connection_init", "payload": {} }))
        .await;
    client.expect_close(4403).await;

    // A valid token, and no token at all, are acknowledged.
    let mut client = WsClient::open(&app.address, TRANSPORT_WS).await;
    client
        .init(json!({ "Authorization": format!("Bearer {alice}") }))
        .await;
    WsClient::connect(&app, LEGACY_WS).await;
}

#[tokio::test]
async fn redis_down_at_connection_init_closes_1011_without_detail() {
    let mut app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.redis.stop();
    let mut client = WsClient::open(&app.address, TRANSPORT_WS).await;
    client
        .send(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {alice}") } }))
        .await;
    let reason = client.expect_close(1011).await;
    assert!(!reason.to_lowercase().contains("redis"), "{reason}");
}

#[tokio::test]
async fn subscribing_before_the_ack_closes_4401() {
    let app = spawn_app().await;
    let mut client = WsClient::open(&app.address, TRANSPORT_WS).await;
    client.subscribe_query("1", SCORE_CHANGED).await;
    assert_eq!(client.expect_close(4401).await, "Unauthorized");

    let mut legacy = WsClient::open(&app.address, LEGACY_WS).await;
    legacy.subscribe_query("1", SCORE_CHANGED).await;
    legacy.expect_connection_error(4401).await;
    app.wait_for_subscriptions(Exactly(0), WITHIN).await;
}

#[tokio::test]
async fn a_duplicate_id_closes_4409_or_is_refused_in_the_legacy_protocol() {
    let app = spawn_app().await;
    let mut client = WsClient::connect(&app, TRANSPORT_WS).await;
    client.subscribe_query("one", SCORE_CHANGED).await;
    app.wait_for_subscriptions(Exactly(1), WITHIN).await;
    client.subscribe_query("one", SCORE_CHANGED).await;
    assert_eq!(
        client.expect_close(4409).await,
        "Subscriber for one already exists"
    );
    app.wait_for_subscriptions(Exactly(0), WITHIN).await;

    // A long id is cut short in the reason.
    let long = "x".repeat(5000);
    let mut client = WsClient::connect(&app, TRANSPORT_WS).await;
    client.subscribe_query(&long, SCORE_CHANGED).await;
    client.subscribe_query(&long, SCORE_CHANGED).await;
    let reason = client.expect_close(4409).await;
    assert!(reason.starts_with("Subscriber for xxx"), "{reason}");

    let mut legacy = WsClient::connect(&app, LEGACY_WS).await;
    legacy.subscribe_query("one", SCORE_CHANGED).await;
    app.wait_for_subscriptions(Exactly(1), WITHIN).await;
    legacy.subscribe_query("one", SCORE_CHANGED).await;
    let error = legacy.next_raw().await;
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["id"], "one");
    assert_eq!(error["payload"]["extensions"]["code"], "BAD_USER_INPUT");
    assert!(error["payload"]["message"]
        .as_str()
        .unwrap()
        .contains("already exists"));
    // The connection and the first subscription go on.
    let alice = app.sign_up("alice").await;
    app.post(&alice, "dup", &[]).await;
    let bob = app.sign_up("bob").await;
    app.vote(&bob, "1").await;
    let event = legacy.next_raw().await;
    assert_eq!(
        (event["type"].as_str(), event["id"].as_str()),
        (Some("data"), Some("one"))
    );
    assert_eq!(app.subscriptions().await, 1);
}

#[tokio::test]
async fn a_second_connection_init_closes_4429() {
    let app = spawn_app().await;
    let mut client = WsClient::connect(&app, TRANSPORT_WS).await;
    client
        .send(json!({ "type": "connection_init", "payload": {} }))
        .await;
    assert_eq!(
        client.expect_close(4429).await,
        "Too many initialisation requests"
    );
    let mut legacy = WsClient::connect(&app, LEGACY_WS).await;
    legacy
        .send(json!({ "type": "connection_init", "payload": {} }))
        .await;
    legacy.expect_connection_error(4429).await;
}

#[tokio::test]
async fn invalid_messages_close_4400_with_a_short_reason() {
    let app = spawn_app().await;
    let garbage = format!("{{not json {}", "z".repeat(10_000));
    let cases = [
        garbage,
        json!({ "type": "nope" }).to_string(),
        json!({ "type": "subscribe", "payload": { "query": "{ articleCount }" } }).to_string(),
        json!({ "type": "subscribe", "id": "1", "payload": { "no": "query" } }).to_string(),
        // The legacy protocol's names are not this protocol's.
        json!({ "type": "start", "id": "1", "payload": { "query": "{ articleCount }" } })
            .to_string(),
    ];
    for case in cases {
        let mut client = WsClient::connect(&app, TRANSPORT_WS).await;
        client.send_text(case.clone()).await;
        let reason = client.expect_close(4400).await;
        assert!(
            !reason.contains("zzz"),
            "the reason does not echo input: {reason}"
        );
    }
    let mut client = WsClient::open(&app.address, TRANSPORT_WS).await;
    client
        .send(json!({ "type": "connection_init", "payload": "a string" }))
        .await;
    client.expect_close(4400).await;

    let mut legacy = WsClient::connect(&app, LEGACY_WS).await;
    legacy.send(json!({ "type": "subscribe", "id": "1" })).await;
    legacy.expect_connection_error(4400).await;
}

#[tokio::test]
async fn operations_complete_and_free_their_slot() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "first", &[]).await;

    let mut client = WsClient::connect(&app, TRANSPORT_WS).await;
    client.send(json!({ "type": "ping" })).await;
    assert_eq!(client.next_raw().await, json!({ "type": "pong" }));
    // A query over the socket: one `next`, then `complete`.
    client.subscribe_query("q", "{ articleCount }").await;
    assert_eq!(
        client.next_raw().await,
        json!({ "id": "q", "type": "next", "payload": { "data": { "articleCount": 1 } } })
    );
    assert_eq!(
        client.next_raw().await,
        json!({ "id": "q", "type": "complete" })
    );
    // The client's `complete` stops a subscription, with no reply.
    client.subscribe_query("s", SCORE_CHANGED).await;
    app.wait_for_subscriptions(Exactly(1), WITHIN).await;
    client.complete("s").await;
    app.wait_for_subscriptions(Exactly(0), WITHIN).await;
    // The id may be used again.
    client.subscribe_query("s", SCORE_CHANGED).await;
    app.wait_for_subscriptions(Exactly(1), WITHIN).await;
    app.vote(&app.sign_up("bob").await, "1").await;
    let event = client.next_raw().await;
    assert_eq!(event["id"], "s");
    assert_eq!(event["payload"]["data"]["scoreChanged"]["votes"], 2);

    let mut legacy = WsClient::connect(&app, LEGACY_WS).await;
    legacy.subscribe_query("s", SCORE_CHANGED).await;
    app.wait_for_subscriptions(Exactly(2), WITHIN).await;
    legacy.complete("s").await;
    assert_eq!(
        legacy.next_raw().await,
        json!({ "id": "s", "type": "complete" })
    );
    app.wait_for_subscriptions(Exactly(1), WITHIN).await;
    legacy.subscribe_query("t", SCORE_CHANGED).await;
    app.wait_for_subscriptions(Exactly(2), WITHIN).await;
    legacy.send(json!({ "type": "connection_terminate" })).await;
    legacy.expect_close(1000).await;
    app.wait_for_subscriptions(Exactly(1), WITHIN).await;
}

#[tokio::test]
async fn a_message_over_the_size_limit_closes_1009() {
    let app = spawn_app_with(|s| s.ws_max_message_bytes = 1024).await;
    let query = format!("{{ articleCount }} # {}", "p".repeat(900));
    // Under the limit, fine.
    let mut client = WsClient::connect(&app, TRANSPORT_WS).await;
    client.subscribe_query("small", &query).await;
    assert_eq!(client.next_raw().await["type"], "next");
    assert_eq!(client.next_raw().await["type"], "complete");
    // Over it: closed, with a close frame the client reads.
    let big = format!("{{ articleCount }} # {}", "p".repeat(2000));
    client.subscribe_query("big", &big).await;
    client.expect_close(1009).await;
    // Well over it (tungstenite refuses it from the frame header).
    let mut client = WsClient::connect(&app, LEGACY_WS).await;
    client.send_text("x".repeat(1_000_000)).await;
    client.expect_close(1009).await;
    assert_eq!(
        app.gql_ok("{ articleCount }", json!({}), None).await["articleCount"],
        0
    );
}

#[tokio::test]
async fn subscriptions_past_the_limit_get_an_error_and_the_others_go_on() {
    let app = spawn_app_with(|s| s.ws_max_subscriptions = 2).await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "limited", &[]).await;
    let bob = app.sign_up("bob").await;

    for protocol in [TRANSPORT_WS, LEGACY_WS] {
        let mut client = WsClient::connect(&app, protocol).await;
        client.subscribe_query("a", SCORE_CHANGED).await;
        client.subscribe_query("b", SCORE_CHANGED).await;
        app.wait_for_subscriptions(Exactly(2), WITHIN).await;
        client.subscribe_query("c", SCORE_CHANGED).await;
        let error = client.next_raw().await;
        assert_eq!(error["type"], "error", "{error}");
        assert_eq!(error["id"], "c");
        let error = if protocol == TRANSPORT_WS {
            assert_eq!(error["payload"].as_array().map(Vec::len), Some(1));
            error["payload"][0].clone()
        } else {
            error["payload"].clone()
        };
        assert_eq!(error["extensions"]["code"], "RATE_LIMITED");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .ends_with("at most 2 active subscriptions per connection"),
            "{error}"
        );
        assert_eq!(app.subscriptions().await, 2);

        // The earlier two keep working.
        app.vote_as(&bob, "1", "DOWN").await;
        let mut ids = vec![
            client.next_raw().await["id"].as_str().unwrap().to_owned(),
            client.next_raw().await["id"].as_str().unwrap().to_owned(),
        ];
        ids.sort();
        assert_eq!(ids, ["a", "b"]);

        // Completing one (`complete`, or the legacy `stop`) frees a slot.
        client.complete("a").await;
        if protocol == LEGACY_WS {
            assert_eq!(
                client.next_raw().await,
                json!({ "id": "a", "type": "complete" })
            );
        }
        app.wait_for_subscriptions(Exactly(1), WITHIN).await;
        client.subscribe_query("c", SCORE_CHANGED).await;
        app.wait_for_subscriptions(Exactly(2), WITHIN).await;
        app.vote_as(&bob, "1", "UP").await;
        let mut ids = vec![
            client.next_raw().await["id"].as_str().unwrap().to_owned(),
            client.next_raw().await["id"].as_str().unwrap().to_owned(),
        ];
        ids.sort();
        assert_eq!(ids, ["b", "c"]);
        drop(client);
        app.wait_for_subscriptions(Exactly(0), WITHIN).await;
    }
}

/// Tries a WebSocket upgrade: the socket, or the refusal's status, headers
/// and body.
async fn try_upgrade(
    app: &TestApp,
) -> Result<WsClient, (u16, Option<String>, Option<String>, Value)> {
    match tokio_tungstenite::connect_async(ws_request(&app.address, TRANSPORT_WS)).await {
        Ok((socket, _)) => Ok(WsClient::over(socket, TRANSPORT_WS)),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_owned())
            };
            let body = response.body().clone().unwrap_or_default();
            Err((
                response.status().as_u16(),
                header("content-type"),
                header("retry-after"),
                serde_json::from_slice(&body).unwrap_or(Value::Null),
            ))
        }
        Err(e) => panic!("upgrade failed: {e}"),
    }
}

#[tokio::test]
async fn connections_per_address_are_limited_and_given_back() {
    let app = spawn_app_with(|s| s.ws_max_connections_per_client = 2).await;
    let first = try_upgrade(&app).await.expect("first");
    let mut second = try_upgrade(&app).await.expect("second");
    let (status, content_type, retry_after, body) =
        try_upgrade(&app).await.err().expect("the third is refused");
    assert_eq!(status, 429);
    assert_eq!(content_type.as_deref(), Some("application/json"));
    assert!(retry_after.is_some());
    let error = &body["errors"][0];
    assert_eq!(
        error["message"],
        "too many WebSocket connections from this address"
    );
    assert_eq!(error["extensions"]["code"], "RATE_LIMITED");
    assert!(error["extensions"]["retryAfter"].as_u64().unwrap() > 0);
    // The two open ones still work.
    second.init(json!({})).await;

    // Closed in any way (a clean close, a dropped socket, a protocol
    // error), a connection gives its slot back.
    drop(first);
    second.send_text("nonsense".into()).await;
    second.expect_close(4400).await;
    let mut reopened = Vec::new();
    eventually(
        "both slots to be given back",
        Duration::from_secs(2),
        async || {
            if let Ok(client) = try_upgrade(&app).await {
                reopened.push(client);
            }
            done_if(reopened.len() == 2, reopened.len())
        },
    )
    .await;
    assert!(
        try_upgrade(&app).await.is_err(),
        "and the limit holds again"
    );
    // Plain HTTP is not counted.
    assert_eq!(
        app.gql_ok("{ articleCount }", json!({}), None).await["articleCount"],
        0
    );
}

#[tokio::test]
async fn a_client_that_never_reads_is_dropped_after_the_send_timeout() {
    let app = spawn_app_with(|s| s.ws_send_timeout_secs = 1).await;
    let alice = app.sign_up("alice").await;
    // Big articles, selected eight times, make big events (~19 KB each), so
    // the buffers (megabytes in the kernel) fill after a few hundred.
    app.gql_ok(
        "mutation($t: String!, $l: String!) { post(title: $t, link: $l) { id } }",
        json!({ "t": "t".repeat(300), "l": format!("https://e.com/{}", "l".repeat(2000)) }),
        Some(&alice),
    )
    .await;

    // The stalled client: a small receive buffer, and it never reads.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let port = app.address.rsplit(':').next().unwrap().parse().unwrap();
    let stream = socket
        .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap();
    let (socket, _) = tokio_tungstenite::client_async(
        ws_request(&app.address, TRANSPORT_WS),
        MaybeTlsStream::Plain(stream),
    )
    .await
    .unwrap();
    let mut stalled = WsClient::over(socket, TRANSPORT_WS);
    stalled.init(json!({})).await;
    let heavy: String = (0..8)
        .map(|i| format!("a{i}: article {{ title link }} "))
        .collect();
    stalled
        .subscribe_query(
            "s",
            &format!("subscription {{ scoreChanged {{ votes {heavy} }} }}"),
        )
        .await;
    let mut reader = WsClient::connect(&app, LEGACY_WS).await;
    reader.subscribe_query("r", SCORE_CHANGED).await;
    app.wait_for_subscriptions(Exactly(2), WITHIN).await;

    // Publish as the vote script does, straight into Redis, in batches the
    // reader keeps up with, until the server drops the stalled client.
    let started = std::time::Instant::now();
    let mut redis = app.redis.conn().await;
    let mut n = 0;
    let mut dropped = false;
    while !dropped && started.elapsed() < Duration::from_secs(15) {
        let mut pipe = redis::pipe();
        for _ in 0..200 {
            let event = json!({ "id": "1", "score": "1", "votes": n, "downvotes": 0, "at": "1.0", "groups": {} });
            pipe.cmd("PUBLISH")
                .arg("votegraph:score-changed")
                .arg(event.to_string())
                .ignore();
            n += 1;
        }
        let () = pipe.query_async(&mut redis).await.unwrap();
        for expected in n - 200..n {
            let event = reader.next_raw().await;
            assert_eq!(
                event["payload"]["data"]["scoreChanged"]["votes"], expected,
                "the reader gets every event: {event}"
            );
        }
        dropped = app.subscriptions().await == 1;
    }
    assert!(
        dropped,
        "the stalled client was dropped ({n} events, {:?})",
        started.elapsed()
    );
    // The server closed the stalled socket: once the client reads, what
    // was in flight arrives, then the end.
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stalled.socket.next()).await {
            Ok(Some(Ok(_))) => {}
            Ok(None | Some(Err(_))) => break,
            Err(_) => panic!("the stalled socket is still open"),
        }
    }
    // The server goes on serving others.
    assert_eq!(
        app.gql_ok("{ articleCount }", json!({}), None).await["articleCount"],
        1
    );
    let mut fresh = WsClient::connect(&app, TRANSPORT_WS).await;
    fresh.send(json!({ "type": "ping" })).await;
    assert_eq!(fresh.next_raw().await, json!({ "type": "pong" }));
    drop(reader);
    app.wait_for_subscriptions(Exactly(0), WITHIN).await;
}

#[tokio::test]
async fn shutdown_closes_every_socket_with_1001() {
    let redis = TestRedis::start().await;
    let (stop, stop_rx) = oneshot::channel();
    let mut server = spawn_server_until(test_settings(&redis), stop_rx).await;
    let mut transport = WsClient::connect_to(&server.address, TRANSPORT_WS, json!({})).await;
    transport.subscribe_query("1", SCORE_CHANGED).await;
    let mut legacy = WsClient::connect_to(&server.address, LEGACY_WS, json!({})).await;
    legacy.subscribe_query("1", SCORE_CHANGED).await;
    // Not yet initialised: closed too.
    let mut fresh = WsClient::open(&server.address, TRANSPORT_WS).await;
    // Let the subscriptions start.
    tokio::time::sleep(Duration::from_millis(200)).await;

    stop.send(()).unwrap();
    for client in [&mut transport, &mut legacy, &mut fresh] {
        assert_eq!(client.expect_close(1001).await, "server shutting down");
    }
    assert!(
        server.stopped_within(Duration::from_secs(10)).await,
        "the server stopped"
    );
}
