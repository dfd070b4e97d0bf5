//! No document within the size limits can crash the server: deep values,
//! deep selections and generated junk, over GET, POST and WebSocket, each
//! against the real binary (a stack overflow aborts a process, which only
//! a separate process can survive to report).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::helpers::{error_code, Binary, TestRedis, WsClient, LEGACY_WS, TRANSPORT_WS};

fn nest(levels: usize, open: &str, inner: &str, close: &str) -> String {
    format!("{}{inner}{}", open.repeat(levels), close.repeat(levels))
}

/// The documents of the attack: 2,400 levels as a GET argument, 1,500 as
/// a POST argument, a variable's default, a directive argument.
fn deep_documents() -> Vec<(&'static str, String)> {
    vec![
        (
            "argument of a root field",
            format!("{{ __typename(x: {}) }}", nest(2_400, "[", "1", "]")),
        ),
        (
            "articles(page:) list",
            format!(
                "{{ articles(page: {}) {{ id }} }}",
                nest(1_500, "[", "1", "]")
            ),
        ),
        (
            "input object",
            format!(
                "{{ articles(page: {}) {{ id }} }}",
                nest(1_500, "{a: ", "1", "}")
            ),
        ),
        (
            "variable default",
            format!(
                "query($v: Int = {}) {{ articleCount }}",
                nest(1_300, "[", "1", "]")
            ),
        ),
        (
            "variable type",
            format!(
                "query($v: {}) {{ articleCount }}",
                nest(1_300, "[", "Int", "]")
            ),
        ),
        (
            "directive argument",
            format!(
                "{{ articleCount @include(if: {}) }}",
                nest(2_000, "[", "true", "]")
            ),
        ),
        (
            "selection sets",
            format!(
                "{{ {} }}",
                nest(1_500, "... on Query {", "articleCount", "}")
            ),
        ),
    ]
}

async fn get(client: &reqwest::Client, address: &str, query: &str) -> (u16, Value) {
    let response = client
        .get(format!("{address}/graphql"))
        .query(&[("query", query)])
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

async fn post(client: &reqwest::Client, address: &str, body: &Value) -> (u16, Value) {
    let response = client
        .post(format!("{address}/graphql"))
        .json(body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

async fn still_healthy(client: &reqwest::Client, server: &Binary) {
    let health = client
        .get(format!("{}/health", server.address))
        .send()
        .await
        .expect("the server is still up");
    assert_eq!(health.status(), 200);
    let log = server.log_text();
    assert!(!log.contains("overflowed its stack"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// Operation `id`'s first answer, an event or an error; the `complete`
/// that follows the previous operation's answer is skipped.
async fn answer(ws: &mut WsClient, id: &str) -> Value {
    loop {
        let message = ws.next_raw().await;
        if message["id"] == id && message["type"] != "complete" {
            return message;
        }
    }
}

/// A WebSocket operation's refusal as an HTTP body reads: `{"errors"}`.
/// A request refused before it runs comes as an event (`next`, `data`)
/// carrying only errors; an `error` message carries them as its payload.
fn refusal(message: &Value) -> Value {
    match message["type"].as_str() {
        Some("next" | "data") => {
            assert!(message["payload"]["data"].is_null(), "{message}");
            json!({ "errors": message["payload"]["errors"] })
        }
        Some("error") if message["payload"].is_array() => json!({ "errors": message["payload"] }),
        Some("error") => json!({ "errors": [message["payload"]] }),
        _ => panic!("expected a refusal: {message}"),
    }
}

fn assert_too_deep(how: &str, name: &str, body: &Value) {
    assert_eq!(
        error_code(body),
        "QUERY_TOO_COMPLEX",
        "{how} {name}: {body}"
    );
    let message = body["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("nested") && message.contains("at most"),
        "{how} {name}: the message names the limit: {message}"
    );
    assert!(body["data"].is_null(), "{how} {name}: nothing ran: {body}");
}

#[tokio::test]
async fn deeply_nested_documents_are_refused_over_get_post_and_websocket() {
    let redis = TestRedis::start().await;
    let server = Binary::start(&redis.url(), &[]).await;
    let client = reqwest::Client::new();
    for (name, document) in deep_documents() {
        assert!(
            document.len() < 32 * 1024,
            "{name} is within the byte limit"
        );
        let (_, body) = get(&client, &server.address, &document).await;
        assert_too_deep("GET", name, &body);
        let (status, body) = post(&client, &server.address, &json!({ "query": document })).await;
        assert_eq!(status, 200);
        assert_too_deep("POST", name, &body);
        // As a persisted query's registration: refused before it is kept.
        let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(document.as_bytes()));
        let apq = json!({ "sha256Hash": hash, "version": 1 });
        let (_, body) = post(
            &client,
            &server.address,
            &json!({ "query": document, "extensions": { "persistedQuery": apq } }),
        )
        .await;
        assert_too_deep("APQ registration", name, &body);
        let (_, body) = post(
            &client,
            &server.address,
            &json!({ "extensions": { "persistedQuery": apq } }),
        )
        .await;
        assert_eq!(error_code(&body), "PERSISTED_QUERY_NOT_FOUND", "{body}");
    }
    for protocol in [TRANSPORT_WS, LEGACY_WS] {
        let mut ws = WsClient::connect_to(&server.address, protocol, json!({})).await;
        for (i, (name, document)) in deep_documents().into_iter().enumerate() {
            ws.subscribe(&i.to_string(), &document, json!({})).await;
            let message = answer(&mut ws, &i.to_string()).await;
            assert_too_deep(protocol, name, &refusal(&message));
        }
        // The connection itself carries on.
        ws.subscribe("after", "{ articleCount }", json!({})).await;
        let message = answer(&mut ws, "after").await;
        assert_eq!(message["payload"]["data"]["articleCount"], 0, "{message}");
        ws.close().await;
    }
    still_healthy(&client, &server).await;
}

#[tokio::test]
async fn deeply_nested_variables_are_refused() {
    let redis = TestRedis::start().await;
    let server = Binary::start(&redis.url(), &[]).await;
    let client = reqwest::Client::new();
    let query = "query($v: [Int]) { articles(page: 1) { id } }";
    // 100 levels: within JSON parsers' own limits (128), beyond ours.
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let (_, body) = post(
        &client,
        &server.address,
        &json!({ "query": query, "variables": { "v": deep } }),
    )
    .await;
    assert_too_deep("POST", "variable", &body);
    let response = client
        .get(format!("{}/graphql", server.address))
        .query(&[
            ("query", query.to_owned()),
            ("variables", json!({ "v": deep }).to_string()),
        ])
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_too_deep("GET", "variable", &body);
    let mut ws = WsClient::connect_to(&server.address, TRANSPORT_WS, json!({})).await;
    ws.subscribe("1", query, json!({ "v": deep })).await;
    let message = answer(&mut ws, "1").await;
    assert_too_deep("WebSocket", "variable", &refusal(&message));
    ws.close().await;
    still_healthy(&client, &server).await;
}

#[tokio::test]
async fn nesting_up_to_the_limits_runs() {
    let redis = TestRedis::start().await;
    let server = Binary::start(&redis.url(), &[]).await;
    let client = reqwest::Client::new();
    // 32 levels of value parse and reach validation (which refuses the
    // type), 33 do not parse at all.
    let at = format!("{{ articles(page: {}) {{ id }} }}", nest(32, "[", "1", "]"));
    let (_, body) = post(&client, &server.address, &json!({ "query": at })).await;
    assert_ne!(error_code(&body), "QUERY_TOO_COMPLEX", "{body}");
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("page"));
    let over = format!("{{ articles(page: {}) {{ id }} }}", nest(33, "[", "1", "]"));
    let (_, body) = post(&client, &server.address, &json!({ "query": over })).await;
    assert_too_deep("POST", "33 levels", &body);
    // A 32-level variable of a list type is coerced and run.
    let mut at = json!(1);
    for _ in 0..31 {
        at = json!([at]);
    }
    let (_, body) = post(
        &client,
        &server.address,
        &json!({ "query": "query($v: [Int]) { articleCount }", "variables": { "v": at } }),
    )
    .await;
    assert_ne!(error_code(&body), "QUERY_TOO_COMPLEX", "{body}");
    // 64 selection levels parse, and the validator's depth limit refuses
    // them; 65 do not parse.
    let deep = format!("{{ {} }}", nest(63, "... on Query {", "articleCount", "}"));
    let (_, body) = post(&client, &server.address, &json!({ "query": deep })).await;
    assert_eq!(error_code(&body), "GRAPHQL_VALIDATION_FAILED", "{body}");
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("depth"));
    let deeper = format!("{{ {} }}", nest(64, "... on Query {", "articleCount", "}"));
    let (_, body) = post(&client, &server.address, &json!({ "query": deeper })).await;
    assert_too_deep("POST", "65 selection levels", &body);
    still_healthy(&client, &server).await;
}

/// Pieces documents are generated from.
const NAMES: [&str; 12] = [
    "articles",
    "article",
    "articleCount",
    "group",
    "feed",
    "id",
    "title",
    "poster",
    "__typename",
    "__schema",
    "ünïcödé",
    "x",
];

/// A random document: mostly plausible GraphQL with values, lists and
/// objects nested to random depths (past every limit sometimes), aliases,
/// directives, fragments and unicode, then sometimes cut or spliced so
/// the parser sees broken input too.
fn generated(rng: &mut StdRng) -> String {
    let mut text = String::new();
    if rng.gen_bool(0.3) {
        text.push_str("query Q($v: ");
        let depth = rng.gen_range(0..60);
        text.push_str(&nest(depth, "[", "Int", "]"));
        if rng.gen_bool(0.5) {
            text.push_str(" = ");
            text.push_str(&value(rng));
        }
        text.push(')');
    }
    text.push_str(&selection(rng, 0));
    if rng.gen_bool(0.3) {
        text.push_str(" fragment F on Article { id ...F title }");
    }
    if rng.gen_bool(0.2) {
        // Cut anywhere (on a character boundary).
        let cut = rng.gen_range(0..=text.chars().count());
        text = text.chars().take(cut).collect();
    }
    if rng.gen_bool(0.2) {
        let at = rng.gen_range(0..=text.chars().count());
        let junk = [
            "[", "{", "(", "\"", "\"\"\"", "#", "…", "\u{0}", "$", "@", "...",
        ][rng.gen_range(0..11)]
        .repeat(rng.gen_range(1..3_000));
        let (head, tail): (String, String) = (
            text.chars().take(at).collect(),
            text.chars().skip(at).collect(),
        );
        text = format!("{head}{junk}{tail}");
    }
    // Within the byte limit (a longer one is refused unread).
    text.chars().take(30_000).collect()
}

fn selection(rng: &mut StdRng, depth: usize) -> String {
    let mut text = String::from("{ ");
    for _ in 0..rng.gen_range(1..4) {
        if rng.gen_bool(0.2) {
            text.push_str("a: ");
        }
        text.push_str(NAMES[rng.gen_range(0..NAMES.len())]);
        if rng.gen_bool(0.5) {
            text.push_str(&format!("(page: {}, pageSize: 2)", value(rng)));
        }
        if rng.gen_bool(0.2) {
            text.push_str(&format!(" @include(if: {})", value(rng)));
        }
        if rng.gen_bool(0.1) {
            text.push_str(" ...F");
        }
        if depth < 70 && rng.gen_bool(0.6) {
            text.push(' ');
            if rng.gen_bool(0.2) {
                text.push_str("... on Query ");
            }
            let deeper = depth + rng.gen_range(1..20);
            text.push_str(&selection(rng, deeper));
        }
        text.push(' ');
    }
    text.push('}');
    text
}

/// A value, nested to a depth drawn from a wide range (most shallow, some
/// past any limit while still within the byte and token limits), with
/// lists and input objects mixed.
fn value(rng: &mut StdRng) -> String {
    let levels = match rng.gen_range(0..10) {
        0..=3 => rng.gen_range(0..4),
        4..=5 => rng.gen_range(4..64),
        6..=7 => rng.gen_range(64..1_000),
        _ => rng.gen_range(1_000..2_400),
    };
    let leaf = match rng.gen_range(0..6) {
        0 => "\"ü [ { \\\" }\"",
        1 => "\"\"\" [[[ \"\"\"",
        2 => "$v",
        3 => "true",
        4 => "-1.5e3",
        _ => "7",
    };
    let objects = rng.gen_range(0..3);
    let (mut open, mut close) = (String::new(), String::new());
    for _ in 0..levels {
        // Objects cost three tokens a level: fewer of them keeps the
        // document under the token limit, where the parser sees it.
        if objects > 0 && rng.gen_range(0..4) < objects {
            open.push_str("{k: ");
            close.push('}');
        } else {
            open.push('[');
            close.push(']');
        }
    }
    let close: String = close.chars().rev().collect();
    format!("{open}{leaf}{close}")
}

/// A JSON value for `variables`, nested to a random depth (serde's own
/// limit, 128, refuses deeper bodies as malformed JSON).
fn generated_variable(rng: &mut StdRng) -> Value {
    let mut v = json!(rng.gen_range(0..10));
    for _ in 0..rng.gen_range(0..120) {
        v = if rng.gen_bool(0.5) {
            json!([v])
        } else {
            json!({ "k": v })
        };
    }
    v
}

#[tokio::test]
async fn generated_documents_never_bring_the_server_down() {
    let seed = std::env::var("VG_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    let cases: usize = std::env::var("VG_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    eprintln!("generated documents: seed {seed} (VG_FUZZ_SEED={seed} repeats this run)");
    let mut rng = StdRng::seed_from_u64(seed);
    let redis = TestRedis::start().await;
    let server = Binary::start(&redis.url(), &[]).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut ws = WsClient::connect_to(&server.address, TRANSPORT_WS, json!({})).await;
    for case in 0..cases {
        let document = generated(&mut rng);
        let variables = json!({ "v": generated_variable(&mut rng) });
        // A URL carries up to 64 KiB (percent-encoding triples brackets).
        let how = match case % 3 {
            0 if document.len() > 12_000 => 1,
            how => how,
        };
        let body = match how {
            0 => {
                let response = client
                    .get(format!("{}/graphql", server.address))
                    .query(&[("query", &document)])
                    .send()
                    .await;
                let response = response.unwrap_or_else(|e| {
                    panic!("seed {seed} case {case}: no answer ({})", e.without_url())
                });
                response.json::<Value>().await
            }
            1 => {
                let response = client
                    .post(format!("{}/graphql", server.address))
                    .json(&json!({ "query": document, "variables": variables }))
                    .send()
                    .await;
                let response = response.unwrap_or_else(|e| {
                    panic!("seed {seed} case {case}: no answer ({})", e.without_url())
                });
                response.json::<Value>().await
            }
            _ => {
                let id = case.to_string();
                ws.subscribe(&id, &document, variables).await;
                Ok(answer(&mut ws, &id).await)
            }
        };
        let body = body
            .unwrap_or_else(|e| panic!("seed {seed} case {case}: not JSON ({e}): {document:.300}"));
        assert!(
            body.get("errors").is_some()
                || body.get("data").is_some()
                || body.get("payload").is_some(),
            "seed {seed} case {case}: {body}"
        );
    }
    ws.close().await;
    still_healthy(&client, &server).await;
}
