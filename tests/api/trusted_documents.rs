//! Trusted documents: a manifest in each form a client build writes
//! (GraphQL Codegen's, Relay's, Apollo's), its documents named by
//! `documentId` or an automatic persisted query's hash over POST, GET and
//! WebSocket; `--trusted-documents-only` refusing every other document;
//! and a bad manifest stopping the start, naming its entry.

use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};
use sha2::Digest;
use votegraph::config::Settings;
use votegraph::startup::Application;

use crate::helpers::{error_code, spawn_app_with, Subscriptions, TestApp, WsClient, TRANSPORT_WS};

const COUNT: &str = "query Count { articleCount }";
const ARTICLE: &str = "query Article($id: ID!) { article(id: $id) { id title } }";
const POSTED: &str = "subscription Posted { articlePosted { title } }";
const OTHER: &str = "query Other { articles { id } }";

fn sha256(text: &str) -> String {
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// GraphQL Codegen's client preset: SHA-256 → document.
fn codegen_manifest() -> Value {
    json!({ sha256(COUNT): COUNT, sha256(ARTICLE): ARTICLE, sha256(POSTED): POSTED })
}

fn apollo_manifest() -> Value {
    let operation = |name: &str, kind: &str, body: &str| json!({ "id": sha256(body), "name": name, "type": kind, "body": body });
    json!({
        "format": "apollo-persisted-query-manifest",
        "version": 1,
        "operations": [operation("Count", "query", COUNT), operation("Posted", "subscription", POSTED)],
    })
}

fn manifest_file(manifest: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), manifest).unwrap();
    file
}

/// A server with `manifest`, and (unless only trusted documents run,
/// which the test's own mutations are not) alice's article "hello".
async fn app_with(manifest: &Value, only: bool) -> TestApp {
    let file = manifest_file(&manifest.to_string());
    let path = file.path().to_owned();
    let app = spawn_app_with(move |s| {
        s.trusted_documents = Some(path);
        s.trusted_documents_only = only;
    })
    .await;
    if !only {
        let alice = app.sign_up("alice").await;
        app.post(&alice, "hello", &[]).await;
    }
    app
}

async fn post_json(app: &TestApp, body: Value) -> (u16, Value) {
    let response = app
        .client
        .post(format!("{}/graphql", app.address))
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn get(app: &TestApp, params: &[(&str, &str)]) -> (u16, Value) {
    let response = app
        .client
        .get(format!("{}/graphql", app.address))
        .query(params)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

fn apq(hash: &str) -> Value {
    json!({ "persistedQuery": { "version": 1, "sha256Hash": hash } })
}

/// One operation over a WebSocket: its first message.
async fn over_ws(app: &TestApp, payload: Value) -> Value {
    let mut ws = WsClient::connect(app, TRANSPORT_WS).await;
    ws.send(json!({ "type": "subscribe", "id": "1", "payload": payload }))
        .await;
    ws.next_raw().await
}

/// The errors a WebSocket operation ends with, as `{"errors": [...]}`.
async fn ws_errors(app: &TestApp, payload: Value) -> Value {
    let message = over_ws(app, payload).await;
    assert_eq!(message["type"], "error", "{message}");
    json!({ "errors": message["payload"] })
}

fn count_is(data: &Value, count: u64) {
    assert_eq!(data, &json!({ "articleCount": count }));
}

fn count_is_one(data: &Value) {
    count_is(data, 1);
}

#[tokio::test]
async fn codegen_documents_run_by_document_id_over_every_transport() {
    let app = app_with(&codegen_manifest(), false).await;
    let hash = sha256(COUNT);
    let prefixed = format!("sha256:{hash}");
    for id in [hash.as_str(), prefixed.as_str(), &hash.to_uppercase()] {
        let (status, body) = post_json(&app, json!({ "documentId": id })).await;
        assert_eq!(status, 200);
        count_is_one(&body["data"]);
        let (_, body) = get(&app, &[("documentId", id)]).await;
        count_is_one(&body["data"]);
        let message = over_ws(&app, json!({ "documentId": id })).await;
        count_is_one(&message["payload"]["data"]);
    }
    let variables = json!({ "id": "1" });
    let body =
        json!({ "documentId": prefixed.replace(&hash, &sha256(ARTICLE)), "variables": variables });
    let (_, body) = post_json(&app, body).await;
    assert_eq!(
        body["data"]["article"],
        json!({ "id": "1", "title": "hello" })
    );

    // A subscription by its id, over a WebSocket.
    let mut ws = WsClient::connect(&app, TRANSPORT_WS).await;
    let payload = json!({ "documentId": format!("sha256:{}", sha256(POSTED)) });
    ws.send(json!({ "type": "subscribe", "id": "s", "payload": payload }))
        .await;
    app.wait_for_subscriptions(Subscriptions::Exactly(1), Duration::from_secs(5))
        .await;
    let alice = app.sign_up("bob").await;
    app.post(&alice, "news", &[]).await;
    assert_eq!(ws.next_event().await["articlePosted"]["title"], "news");

    // Any other document still runs, and an unknown id is not found.
    let other = app.gql_ok(OTHER, json!({}), None).await;
    assert_eq!(other["articles"].as_array().unwrap().len(), 2);
    let unknown = format!("sha256:{}", sha256(OTHER));
    let (_, body) = post_json(&app, json!({ "documentId": unknown })).await;
    assert_eq!(error_code(&body), "PERSISTED_QUERY_NOT_FOUND");
    let long = "x".repeat(257);
    let (status, body) = post_json(&app, json!({ "documentId": long })).await;
    assert_eq!((status, error_code(&body)), (400, "BAD_REQUEST"), "{body}");
    let (status, body) = post_json(&app, json!({ "documentId": hash, "query": COUNT })).await;
    assert_eq!((status, error_code(&body)), (400, "BAD_REQUEST"), "{body}");
}

#[tokio::test]
async fn relay_ids_are_matched_as_given() {
    // Relay's persisted queries: its own ids (MD5s), not SHA-256s.
    let manifest = json!({ "3f2a9c0e1b7d4c58a6e9f0d1c2b3a4e5": COUNT, "Article_v2": ARTICLE });
    let app = app_with(&manifest, false).await;
    let (_, body) = post_json(
        &app,
        json!({ "documentId": "3f2a9c0e1b7d4c58a6e9f0d1c2b3a4e5" }),
    )
    .await;
    count_is_one(&body["data"]);
    let (_, body) = get(
        &app,
        &[("documentId", "Article_v2"), ("variables", r#"{"id":"1"}"#)],
    )
    .await;
    assert_eq!(body["data"]["article"]["title"], "hello");
    // Every trusted document may be named by its SHA-256 too.
    let (_, body) = post_json(&app, json!({ "documentId": sha256(COUNT) })).await;
    count_is_one(&body["data"]);
    let (_, body) = post_json(
        &app,
        json!({ "documentId": "3F2A9C0E1B7D4C58A6E9F0D1C2B3A4E5" }),
    )
    .await;
    assert_eq!(error_code(&body), "PERSISTED_QUERY_NOT_FOUND");
}

#[tokio::test]
async fn apollo_manifest_documents_run_by_their_hash() {
    let app = app_with(&apollo_manifest(), false).await;
    let hash = sha256(COUNT);
    // The first request by hash alone finds it: nothing was registered.
    let extensions = apq(&hash).to_string();
    let (status, body) = get(&app, &[("extensions", &extensions)]).await;
    assert_eq!(status, 200);
    count_is_one(&body["data"]);
    let (_, body) = post_json(&app, json!({ "extensions": apq(&hash) })).await;
    count_is_one(&body["data"]);
    let message = over_ws(&app, json!({ "extensions": apq(&hash) })).await;
    count_is_one(&message["payload"]["data"]);
    let (_, body) = post_json(&app, json!({ "documentId": format!("sha256:{hash}") })).await;
    count_is_one(&body["data"]);
    let both = json!({ "documentId": hash, "extensions": apq(&hash) });
    let (status, body) = post_json(&app, both).await;
    assert_eq!((status, error_code(&body)), (400, "BAD_REQUEST"));
}

#[tokio::test]
async fn only_trusted_documents_run_with_trusted_documents_only() {
    let app = app_with(&codegen_manifest(), true).await;
    let (_, body) = post_json(&app, json!({ "documentId": sha256(COUNT) })).await;
    count_is(&body["data"], 0);
    // A trusted document sent whole is that document.
    count_is(&app.gql_ok(COUNT, json!({}), None).await, 0);

    let refused = |body: &Value| {
        assert_eq!(error_code(body), "PERSISTED_QUERY_NOT_IN_LIST", "{body}");
        assert!(body.get("data").is_none(), "{body}");
    };
    // Refused before parsing: a document that does not even parse.
    for text in [OTHER, "{ articles {"] {
        let (status, body) = post_json(&app, json!({ "query": text })).await;
        assert_eq!(status, 200);
        refused(&body);
        refused(&get(&app, &[("query", text)]).await.1);
        refused(&ws_errors(&app, json!({ "query": text })).await);
    }
    let subscription = json!({ "query": "subscription { articlePosted { id } }" });
    refused(&ws_errors(&app, subscription).await);
    let (_, body) = post_json(&app, json!({ "documentId": sha256(OTHER) })).await;
    refused(&body);
    let response = app
        .client
        .post(format!("{}/graphql", app.address))
        .header("accept", "application/graphql-response+json")
        .json(&json!({ "query": OTHER }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);

    // Automatic persisted queries register nothing.
    let registering = json!({ "query": OTHER, "extensions": apq(&sha256(OTHER)) });
    refused(&post_json(&app, registering).await.1);
    refused(
        &post_json(&app, json!({ "extensions": apq(&sha256(OTHER)) }))
            .await
            .1,
    );
}

/// The error `Application::build` stops with, for a manifest holding
/// `manifest`.
async fn start_error(manifest: &str) -> String {
    let file = manifest_file(manifest);
    let mut settings = Settings::for_redis("redis://127.0.0.1:1");
    settings.trusted_documents = Some(file.path().to_owned());
    match Application::build(settings).await {
        Ok(_) => panic!("a server started with the manifest {manifest}"),
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test]
async fn a_bad_manifest_stops_the_start_naming_the_entry() {
    let deep = "{ articles(pageSize: 100) { poster { articles(pageSize: 100) { poster { articles(pageSize: 100) { id } } } } } }";
    let wrong_hash = sha256(OTHER);
    let long_id = "x".repeat(300);
    let mut missing_body = apollo_manifest();
    missing_body["operations"][1]
        .as_object_mut()
        .unwrap()
        .remove("body");
    let mut version_2 = apollo_manifest();
    version_2["version"] = json!(2);
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            "[1, 2]".into(),
            vec!["trusted documents", "not a JSON object"],
        ),
        (
            json!({ "Count": 5 }).to_string(),
            vec![r#"entry "Count""#, "must be a string"],
        ),
        (
            json!({ &wrong_hash: COUNT }).to_string(),
            vec![&wrong_hash[..16], "not the SHA-256 of its document"],
        ),
        (
            json!({ "Nope": "{ nope }" }).to_string(),
            vec![r#"entry "Nope""#, "nope"],
        ),
        (
            json!({ "Broken": "{ articles {" }).to_string(),
            vec![r#"entry "Broken""#, "syntax error"],
        ),
        (
            json!({ "Deep": deep }).to_string(),
            vec![r#"entry "Deep""#, "costs"],
        ),
        (
            json!({ &long_id: COUNT }).to_string(),
            vec!["1 to 256 bytes"],
        ),
        (missing_body.to_string(), vec!["operations[1]", "body"]),
        (version_2.to_string(), vec!["version 1"]),
    ];
    for (manifest, expected) in cases {
        let error = start_error(&manifest).await;
        for part in expected {
            assert!(error.contains(part), "{manifest}: `{error}` lacks `{part}`");
        }
    }
    let mut settings = Settings::for_redis("redis://127.0.0.1:1");
    settings.trusted_documents = Some("/nonexistent/manifest.json".into());
    let error = Application::build(settings)
        .await
        .err()
        .expect("no file, no start");
    assert!(
        format!("{error:#}").contains("/nonexistent/manifest.json"),
        "{error:#}"
    );
    let only = Settings::try_parse_from(["votegraph", "--trusted-documents-only"]);
    assert!(only.is_err(), "--trusted-documents-only needs a manifest");
}
