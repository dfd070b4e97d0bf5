//! Request ids and the log: `X-Request-Id` on every response, the same id
//! on every log line of the request (WebSocket lines included), JSON lines
//! for log shippers, and a wrong `REDIS_URL` named in the log but never
//! to clients.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::helpers::{
    free_port, poll_until, spawn_app, ws_request, Binary, TestRedis, TRANSPORT_WS,
};

fn is_generated_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let app = spawn_app().await;
    let url = |path: &str| format!("{}{path}", app.address);
    let responses = [
        // A query, a refused mutation over GET, a wrong media type, an
        // unknown route, the health check and the metrics.
        app.client
            .post(url("/graphql"))
            .json(&json!({ "query": "{ articleCount }" }))
            .send(),
        app.client
            .get(url("/graphql?query=mutation%20%7B%20logOut%20%7D"))
            .send(),
        app.client.post(url("/graphql")).body("x").send(),
        app.client.get(url("/nowhere")).send(),
        app.client.get(url("/health")).send(),
        app.client.get(url("/metrics")).send(),
    ];
    let mut ids = Vec::new();
    for response in responses {
        let response = response.await.unwrap();
        let id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(is_generated_id(&id), "{} {id}", response.status());
        ids.push(id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6, "each request its own id");

    // A sane incoming id is kept; anything else is replaced.
    let with = |id: &'static str| {
        app.client
            .get(url("/health"))
            .header("x-request-id", id)
            .send()
    };
    let kept = with("4bf92f3577b34da6a3ce929d0e0e4736").await.unwrap();
    assert_eq!(
        kept.headers()["x-request-id"],
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    for bad in ["two words", "\"quoted\"", "x=1,level=ERROR"] {
        let replaced = with(bad).await.unwrap();
        let id = replaced.headers()["x-request-id"].to_str().unwrap();
        assert!(is_generated_id(id), "{bad:?} → {id}");
    }
}

/// The log's JSON lines, each one parsed (a line that is not JSON fails).
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The request id of a JSON log line, from its spans.
fn line_request_id(line: &Value) -> Option<&str> {
    line["spans"]
        .as_array()?
        .iter()
        .find_map(|span| span["request_id"].as_str())
}

#[tokio::test]
async fn json_logs_put_the_request_id_on_every_line_of_a_request() {
    let redis = TestRedis::start().await;
    let server = Binary::start(
        &redis.url(),
        &[
            ("VOTEGRAPH_LOG_FORMAT", "json"),
            ("RUST_LOG", "info,votegraph=debug"),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/graphql", server.address))
        .header("x-request-id", "trace-abc-123")
        .json(&json!({ "query": "query Count { articleCount }" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-abc-123");

    // A WebSocket's lines, written long after its upgrade request was
    // served, carry that request's id too.
    let mut request = ws_request(&server.address, TRANSPORT_WS);
    request
        .headers_mut()
        .insert("x-request-id", "ws-upgrade-42".parse().unwrap());
    let (mut socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.headers()["x-request-id"], "ws-upgrade-42");
    socket
        .send(Message::text("not a protocol message"))
        .await
        .unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(frame)) = socket.next().await {
            if let Message::Close(frame) = frame {
                return frame.map(|f| u16::from(f.code));
            }
        }
        None
    })
    .await
    .unwrap();
    assert_eq!(closed, Some(4400));

    // The lines so far, once the WebSocket's is among them.
    let tenth = Duration::from_millis(100);
    let lines = poll_until(Duration::from_secs(5), tenth, async || {
        let lines = json_lines(&server.log_text());
        let ws_logged = lines.iter().any(|l| {
            l["message"] == "closing WebSocket" && line_request_id(l) == Some("ws-upgrade-42")
        });
        if ws_logged {
            Ok(lines)
        } else {
            Err(lines)
        }
    })
    .await
    .unwrap_or_else(|lines| lines);
    let served = lines
        .iter()
        .find(|l| l["message"] == "served" && line_request_id(l) == Some("trace-abc-123"))
        .unwrap_or_else(|| panic!("no served line for the request: {lines:#?}"));
    assert_eq!(served["level"], "INFO");
    assert_eq!(served["status"], 200);
    assert_eq!(served["operation"], "Count");
    assert_eq!(served["operation_type"], "query");
    assert_eq!(served["code"], "OK");
    assert_eq!(served["span"]["path"], "/graphql");
    assert!(
        lines.iter().any(|l| l["message"] == "closing WebSocket"
            && line_request_id(l) == Some("ws-upgrade-42")
            && l["code"] == 4400),
        "the WebSocket's line carries its upgrade's id: {lines:#?}"
    );
}

#[tokio::test]
async fn a_wrong_redis_url_is_named_in_the_log_and_never_to_clients() {
    // A port nothing listens on.
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}/0");
    let server = Binary::start_answering(&url, &[("VOTEGRAPH_POOL_TIMEOUT_MS", "300")]).await;
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/graphql", server.address))
        .header("x-request-id", "wrong-url-1")
        .json(&json!({ "query": "{ articleCount }" }))
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["errors"][0]["message"], "storage unavailable");
    assert_eq!(body["errors"][0]["extensions"]["code"], "INTERNAL");
    assert!(!text.to_lowercase().contains("refused"), "{text}");
    assert!(!text.contains(&port.to_string()), "{text}");

    // The log so far, once it has both lines.
    let tenth = Duration::from_millis(100);
    let log = poll_until(Duration::from_secs(5), tenth, async || {
        let log = server.log_text();
        if log.contains("redis does not answer") && log.contains("request_id=wrong-url-1") {
            Ok(log)
        } else {
            Err(log)
        }
    })
    .await
    .unwrap_or_else(|log| log);
    let address = format!("127.0.0.1:{port}");
    // At startup, before any request: the address and the cause.
    let startup = log
        .lines()
        .find(|l| l.contains("redis does not answer"))
        .unwrap_or_else(|| panic!("no startup line: {log}"));
    assert!(startup.contains(&address), "{startup}");
    assert!(startup.contains("Connection refused"), "{startup}");
    assert!(startup.contains("REDIS_URL"), "{startup}");
    // The request's own error line: its id, the address and the cause.
    let failed = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("request_id=wrong-url-1"))
        .unwrap_or_else(|| panic!("no error line for the request: {log}"));
    assert!(failed.contains(&address), "{failed}");
    assert!(failed.contains("Connection refused"), "{failed}");
}
