//! Ended sessions end everywhere: a WebSocket authenticated with a token
//! is closed with 4403 within a second of that token's end, on every
//! instance, whether the end is a `logOut` (on any instance), an expiry or
//! a session deleted in Redis by hand.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{
    done_if, eventually, gql_at, spawn_app, spawn_server, test_settings, Binary, Instance, Seen,
    TestApp, TestRedis, WsClient, LEGACY_WS, TRANSPORT_WS,
};

/// The longest a socket may outlive its session.
const WITHIN: Duration = Duration::from_secs(1);

fn session_key(token: &str) -> String {
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()));
    format!("session:{hash}")
}

/// A socket authenticated with `token` on the server at `address`, that
/// has shown it is logged in (`me`).
async fn logged_in_socket(
    address: &str,
    protocol: &'static str,
    token: &str,
    name: &str,
) -> WsClient {
    let mut raw = WsClient::open(address, protocol).await;
    raw.init(json!({ "Authorization": format!("Bearer {token}") }))
        .await;
    let answer = query(&mut raw, "me", "{ me { name } }").await;
    assert_eq!(answer["data"]["me"]["name"], name, "{answer}");
    raw
}

/// Runs a query or mutation over `raw`: its payload, once its `complete`
/// came too.
async fn query(raw: &mut WsClient, id: &str, document: &str) -> Value {
    raw.subscribe_query(id, document).await;
    let answer = raw.next_raw().await;
    assert_eq!(answer["id"], id, "{answer}");
    assert!(
        answer["type"] == "next" || answer["type"] == "data",
        "{answer}"
    );
    let complete = raw.next_raw().await;
    assert_eq!(complete, json!({ "id": id, "type": "complete" }));
    answer["payload"].clone()
}

/// Waits for the socket's end: the legacy protocol's `connection_error`
/// first, then a close with 4403. Returns when it came.
async fn closed_4403(raw: &mut WsClient) -> Instant {
    loop {
        match raw.next().await {
            Seen::Closed(code, reason) => {
                assert_eq!(code, 4403, "{reason}");
                assert!(reason.contains("session ended"), "{reason}");
                return Instant::now();
            }
            Seen::Msg(message) if message["type"] == "connection_error" => {
                assert_eq!(raw.protocol, LEGACY_WS);
                let text = message["payload"]["message"].as_str().unwrap_or_default();
                assert!(text.contains("session ended"), "{message}");
            }
            other => panic!("expected the close, saw {other:?}"),
        }
    }
}

async fn two_instances() -> (TestApp, Instance) {
    let app = spawn_app().await;
    let other = spawn_server(test_settings(&app.redis)).await;
    (app, other)
}

#[tokio::test]
async fn log_out_on_one_instance_closes_the_sockets_on_every_instance() {
    let (app, other) = two_instances().await;
    let token = app.sign_up("alice").await;
    let bystander = app.sign_up("bob").await;
    let article = app.post(&bystander, "a story", &[]).await;
    let mut sockets = Vec::new();
    for address in [&app.address, &other.address] {
        for protocol in [TRANSPORT_WS, LEGACY_WS] {
            sockets.push(logged_in_socket(address, protocol, &token, "alice").await);
        }
    }
    let mut bob = logged_in_socket(&other.address, TRANSPORT_WS, &bystander, "bob").await;
    let mut anonymous = WsClient::connect_to(&other.address, TRANSPORT_WS, json!({})).await;

    let body = app
        .gql_ok("mutation { logOut }", json!({}), Some(&token))
        .await;
    assert_eq!(body["logOut"], true);
    let logged_out = Instant::now();
    for socket in &mut sockets {
        let closed = closed_4403(socket).await;
        assert!(
            closed - logged_out <= WITHIN,
            "closed {:?} after logOut",
            closed - logged_out
        );
    }
    // Over HTTP the token is no one now; other sockets carry on.
    let me = gql_at(
        &app.client,
        &other.address,
        "{ me { name } }",
        json!({}),
        Some(&token),
        None,
    )
    .await;
    assert!(me["data"]["me"].is_null(), "{me}");
    let vote = format!(
        "mutation {{ vote(articleId: \"{}\") {{ votes }} }}",
        article["id"].as_str().unwrap()
    );
    let answer = query(&mut bob, "vote", &vote).await;
    assert_eq!(answer["data"]["vote"]["votes"], 1, "{answer}");
    let answer = query(&mut anonymous, "count", "{ articleCount }").await;
    assert_eq!(answer["data"]["articleCount"], 1, "{answer}");
}

#[tokio::test]
async fn an_expired_or_deleted_session_closes_its_sockets_within_a_second() {
    let (app, other) = two_instances().await;
    let mut admin = app.redis.conn().await;
    for (name, how) in [("carol", "expires"), ("dave", "is deleted")] {
        let token = app.sign_up(name).await;
        let mut sockets = vec![
            logged_in_socket(&app.address, TRANSPORT_WS, &token, name).await,
            logged_in_socket(&other.address, LEGACY_WS, &token, name).await,
        ];
        // Nobody logs out: the session just stops existing, as at the end
        // of its 30 days or when an operator deletes it.
        let ended = if how == "expires" {
            let () = redis::cmd("PEXPIRE")
                .arg(session_key(&token))
                .arg(100)
                .query_async(&mut admin)
                .await
                .unwrap();
            Instant::now() + Duration::from_millis(100)
        } else {
            let () = redis::cmd("DEL")
                .arg(session_key(&token))
                .query_async(&mut admin)
                .await
                .unwrap();
            Instant::now()
        };
        for socket in &mut sockets {
            let closed = closed_4403(socket).await;
            assert!(
                closed.saturating_duration_since(ended) <= WITHIN,
                "the session {how}: closed {:?} later",
                closed.saturating_duration_since(ended)
            );
        }
    }
    // A socket whose session lives is left alone by the sweeps.
    let token = app.sign_up("erin").await;
    let mut alive = logged_in_socket(&other.address, TRANSPORT_WS, &token, "erin").await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let answer = query(&mut alive, "again", "{ me { name } }").await;
    assert_eq!(answer["data"]["me"]["name"], "erin", "{answer}");
}

/// On an empty Redis, the first start files its no sessions and says so,
/// rather than failing and trying again at every start.
#[tokio::test]
async fn the_first_start_on_an_empty_redis_files_the_sessions_without_a_warning() {
    let redis = TestRedis::start().await;
    let server = Binary::start(&redis.url(), &[]).await;
    eventually(
        "the sessions to be filed",
        Duration::from_secs(5),
        async || {
            let log = server.log_text();
            done_if(log.contains("filed the sessions by user"), log)
        },
    )
    .await;
    let log = server.log_text();
    assert!(!log.contains("filing the sessions by user failed"), "{log}");
}
