//! The GraphQL-over-HTTP contract: media types from `Accept`, the status
//! codes that go with them, a JSON GraphQL error with a code for every
//! refusal, readable parse errors, response keys in document order, and a
//! clear answer to a WebSocket upgrade without a subprotocol.

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::helpers::{error_code, spawn_app, TestApp, WsClient, TRANSPORT_WS};

const GRAPHQL_RESPONSE: &str = "application/graphql-response+json";

/// POSTs `body` with `accept` (none when empty); (status, content type,
/// raw body).
async fn post(app: &TestApp, accept: &str, body: Value) -> (u16, String, String) {
    let mut request = app
        .client
        .post(format!("{}/graphql", app.address))
        .json(&body);
    if !accept.is_empty() {
        request = request.header("accept", accept);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let kind = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    (status, kind, response.text().await.unwrap())
}

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test]
async fn the_response_media_type_follows_accept_and_sets_the_status_codes() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    app.post(&token, "one", &[]).await;
    let query = |q: &str| json!({ "query": q });

    // Without Accept, or preferring JSON: application/json.
    for accept in [
        "",
        "application/json",
        "*/*",
        "application/json, application/graphql-response+json;q=0.5",
    ] {
        let (status, kind, body) = post(&app, accept, query("{ articleCount }")).await;
        assert_eq!(
            (status, kind.as_str()),
            (200, "application/json"),
            "{accept}"
        );
        assert_eq!(parsed(&body)["data"]["articleCount"], 1);
    }
    // Asked for (as Apollo Client 4 does): the spec's media type.
    let apollo = "application/graphql-response+json,application/json;q=0.9";
    for accept in [GRAPHQL_RESPONSE, apollo] {
        let (status, kind, body) = post(&app, accept, query("{ articleCount }")).await;
        assert_eq!((status, kind.as_str()), (200, GRAPHQL_RESPONSE), "{accept}");
        assert_eq!(parsed(&body)["data"]["articleCount"], 1);
    }

    // Requests that fail before execution: 400 under the new media type,
    // 200 under application/json, and no `data` key under either.
    let failing = [
        (query("{ articles { id "), "GRAPHQL_PARSE_FAILED"),
        (query("{ articles { nope } }"), "GRAPHQL_VALIDATION_FAILED"),
        (
            json!({ "query": "query($n: Int!) { articles(pageSize: $n) { id } }", "variables": { "n": "many" } }),
            "GRAPHQL_VALIDATION_FAILED",
        ),
        (
            json!({ "query": "query($n: Int!) { articles(pageSize: $n) { id } }" }),
            "BAD_USER_INPUT",
        ),
        (
            json!({ "query": "query($n: Int!) { articles(pageSize: $n) { id } }", "variables": { "n": null } }),
            "BAD_USER_INPUT",
        ),
        (query("{ a: articleCount } { b: articleCount }"), "GRAPHQL_VALIDATION_FAILED"),
        (
            json!({ "query": "query A { articleCount } query B { articleCount }", "operationName": "C" }),
            "GRAPHQL_VALIDATION_FAILED",
        ),
        (
            query(&format!("{{ {} }}", "a: articles(pageSize: 100) { poster { articles(pageSize: 100) { poster { articles(pageSize: 100) { id } } } } }")),
            "QUERY_TOO_COMPLEX",
        ),
    ];
    for (request, code) in failing {
        for (accept, want_status, want_kind) in [
            ("", 200, "application/json"),
            (GRAPHQL_RESPONSE, 400, GRAPHQL_RESPONSE),
        ] {
            let (status, kind, text) = post(&app, accept, request.clone()).await;
            assert_eq!(
                (status, kind.as_str()),
                (want_status, want_kind),
                "{request} {text}"
            );
            let body = parsed(&text);
            assert_eq!(error_code(&body), code, "{request}: {text}");
            assert!(body.get("data").is_none(), "no data key: {text}");
        }
    }
    // A missing variable is refused before execution, with its position.
    let (_, _, text) = post(
        &app,
        GRAPHQL_RESPONSE,
        json!({ "query": "query($n: Int!) { articles(pageSize: $n) { id } }" }),
    )
    .await;
    let body = parsed(&text);
    assert_eq!(
        body["errors"][0]["locations"],
        json!([{ "line": 1, "column": 8 }])
    );
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("$n"));

    // An error while executing keeps `data` and answers 200.
    let (status, _, text) = post(
        &app,
        GRAPHQL_RESPONSE,
        query("{ article(id: \"seven\") { id } articleCount }"),
    )
    .await;
    let body = parsed(&text);
    assert_eq!(status, 200, "{text}");
    assert_eq!(error_code(&body), "BAD_USER_INPUT");
    assert_eq!(body["data"]["articleCount"], 1, "{text}");

    // A mutation over GET is a 405 either way.
    let response = app
        .client
        .get(format!("{}/graphql", app.address))
        .query(&[("query", "mutation { logOut }")])
        .header("accept", GRAPHQL_RESPONSE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    assert_eq!(response.headers()["content-type"], GRAPHQL_RESPONSE);
}

#[tokio::test]
async fn parse_errors_are_readable_and_located() {
    let app = spawn_app().await;
    let (_, _, text) = post(&app, "", json!({ "query": "{ articles { id " })).await;
    let body = parsed(&text);
    let error = &body["errors"][0];
    let message = error["message"].as_str().unwrap();
    assert!(
        !message.contains("-->") && !message.contains('\n'),
        "{message}"
    );
    assert!(
        !message.contains("^---") && !message.contains('|'),
        "{message}"
    );
    assert!(
        message.starts_with("syntax error at line 1, column 17: expected selection set"),
        "{message}"
    );
    assert_eq!(error["locations"], json!([{ "line": 1, "column": 17 }]));
    assert_eq!(error["extensions"]["code"], "GRAPHQL_PARSE_FAILED");
    // The message comes first, as the spec lists it.
    assert!(text.starts_with("{\"errors\":[{\"message\":"), "{text}");

    // A position past the first line.
    let (_, _, text) = post(
        &app,
        "",
        json!({ "query": "{\n  articles(page: ) { id } }" }),
    )
    .await;
    let error = &parsed(&text)["errors"][0];
    assert_eq!(
        error["locations"],
        json!([{ "line": 2, "column": 18 }]),
        "{text}"
    );
}

#[tokio::test]
async fn every_refusal_is_a_json_graphql_error_with_a_code() {
    let app = spawn_app().await;
    let url = format!("{}/graphql", app.address);
    let json_post = |body: &'static str| {
        app.client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
    };
    let cases = [
        (
            "malformed JSON",
            json_post("{\"query\": "),
            400,
            "BAD_REQUEST",
        ),
        // Batching is not supported: one operation per request.
        (
            "a batch",
            json_post("[{\"query\": \"{ articleCount }\"}, {\"query\": \"{ articleCount }\"}]"),
            400,
            "BAD_REQUEST",
        ),
        (
            "no query",
            json_post("{\"variables\": {}}"),
            400,
            "BAD_REQUEST",
        ),
        (
            "a query that is not a string",
            json_post("{\"query\": 7}"),
            400,
            "BAD_REQUEST",
        ),
        (
            "variables that are not an object",
            json_post("{\"query\": \"{ articleCount }\", \"variables\": [1]}"),
            400,
            "BAD_REQUEST",
        ),
        (
            "bad variables in a GET",
            app.client
                .get(&url)
                .query(&[("query", "{ articleCount }"), ("variables", "{nope")]),
            400,
            "BAD_REQUEST",
        ),
        (
            "a GET without a query",
            app.client.get(&url),
            400,
            "BAD_REQUEST",
        ),
        (
            "a form post",
            app.client
                .post(&url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body("query=x"),
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            "PUT",
            app.client
                .put(&url)
                .json(&json!({ "query": "{ articleCount }" })),
            405,
            "METHOD_NOT_ALLOWED",
        ),
        ("DELETE", app.client.delete(&url), 405, "METHOD_NOT_ALLOWED"),
    ];
    for (name, request, status, code) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{name}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{name}"
        );
        if status == 405 {
            assert_eq!(response.headers()["allow"], "GET, POST", "{name}");
        }
        let body = parsed(&response.text().await.unwrap());
        assert_eq!(error_code(&body), code, "{name}: {body}");
        assert!(
            body["errors"][0]["message"].as_str().unwrap().len() > 10,
            "{name}"
        );
        assert!(body.get("data").is_none(), "{name}: {body}");
    }
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_json_errors() {
    let app = spawn_app().await;
    let at = |path: &str| format!("{}{path}", app.address);
    let cases = [
        ("GET /admin", app.client.get(at("/admin")), 404, "NOT_FOUND"),
        (
            "POST /graphql/extra",
            app.client.post(at("/graphql/extra")).body("{}"),
            404,
            "NOT_FOUND",
        ),
        (
            "GET an unknown asset",
            app.client.get(at("/assets/graphiql/nope.js")),
            404,
            "NOT_FOUND",
        ),
        (
            "POST /health",
            app.client.post(at("/health")),
            405,
            "METHOD_NOT_ALLOWED",
        ),
        (
            "DELETE /metrics",
            app.client.delete(at("/metrics")),
            405,
            "METHOD_NOT_ALLOWED",
        ),
        (
            "POST /",
            app.client.post(at("/")),
            405,
            "METHOD_NOT_ALLOWED",
        ),
    ];
    for (name, request, status, code) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{name}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{name}"
        );
        if status == 405 {
            assert_eq!(response.headers()["allow"], "GET", "{name}");
        }
        let body = parsed(&response.text().await.unwrap());
        assert_eq!(error_code(&body), code, "{name}: {body}");
    }
    let health = app.client.get(at("/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn response_keys_follow_the_document_over_http_and_websocket() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    app.post(&token, "ordered", &["g"]).await;
    // `c` is ready at once, `b` needs one Redis reply and `a` two: by
    // completion they would come back c, b, a (async-graphql#612).
    let query = "{ b: articleCount a: articles { title ...F id } c: __typename } \
                 fragment F on Article { votes poster { name karma } }";
    let expected = r#"{"data":{"b":1,"a":[{"title":"ordered","votes":1,"poster":{"name":"alice","karma":1},"id":"1"}],"c":"Query"}}"#;
    for token in [None, Some(token.as_str())] {
        let mut request = app
            .client
            .post(format!("{}/graphql", app.address))
            .json(&json!({ "query": query }));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let text = request.send().await.unwrap().text().await.unwrap();
        assert_eq!(text, expected, "logged in: {}", token.is_some());
    }

    // The same through the WebSocket executor (raw text, not re-parsed).
    let mut socket = WsClient::open(&app.address, TRANSPORT_WS).await.socket;
    socket
        .send(Message::text(
            json!({ "type": "connection_init" }).to_string(),
        ))
        .await
        .unwrap();
    let mut texts = Vec::new();
    loop {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), socket.next())
            .await
            .expect("a message")
            .expect("open")
            .expect("no error");
        let Message::Text(text) = frame else { continue };
        let message: Value = serde_json::from_str(&text).unwrap();
        match message["type"].as_str() {
            Some("connection_ack") => socket
                .send(Message::text(
                    json!({ "type": "subscribe", "id": "1", "payload": { "query": query } })
                        .to_string(),
                ))
                .await
                .unwrap(),
            Some("next") => texts.push(text.to_string()),
            Some("complete") => break,
            _ => {}
        }
    }
    let _ = socket.close(None).await;
    assert_eq!(texts.len(), 1);
    let payload = texts[0]
        .split_once("\"payload\":")
        .map(|(_, rest)| rest)
        .unwrap();
    assert!(
        payload.starts_with(&expected[..expected.len() - 1]),
        "{}",
        texts[0]
    );
}

#[tokio::test]
async fn a_websocket_upgrade_without_a_subprotocol_is_told_why() {
    let app = spawn_app().await;
    let target = app.address.trim_start_matches("http://");
    let exchange = |request: String| async move {
        let mut stream = tokio::net::TcpStream::connect(target).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = vec![0u8; 4096];
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut out))
            .await
            .expect("an answer")
            .unwrap();
        String::from_utf8_lossy(&out[..n]).into_owned()
    };
    let upgrade = |protocol: &str| {
        format!(
            "GET /graphql HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
             sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n{protocol}\r\n"
        )
    };
    for protocol in ["", "sec-websocket-protocol: chat\r\n"] {
        let reply = exchange(upgrade(protocol)).await;
        assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
        assert!(reply.contains("content-type: application/json"), "{reply}");
        let body = parsed(reply.split("\r\n\r\n").nth(1).unwrap());
        assert_eq!(error_code(&body), "BAD_REQUEST");
        let message = body["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("graphql-transport-ws"), "{message}");
    }
    // With one, the upgrade goes through.
    let reply = exchange(upgrade("sec-websocket-protocol: graphql-transport-ws\r\n")).await;
    assert!(reply.starts_with("HTTP/1.1 101"), "{reply}");
}
