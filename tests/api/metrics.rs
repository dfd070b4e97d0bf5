//! `GET /metrics`: Prometheus text that Prometheus' own parser reads, with
//! counts that follow what the server did, bounded labels, and no Redis
//! call per scrape.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{
    done_if, eventually_every, needed, python, reads_processed, spawn_app, spawn_app_with, Program,
    TestApp, WsClient, TRANSPORT_WS,
};

/// The text of `/metrics` at `address`, checked for its status and type.
pub async fn metrics_text(client: &reqwest::Client, address: &str) -> String {
    let response = client
        .get(format!("{address}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    response.text().await.unwrap()
}

/// One sample as the parser read it.
#[derive(Debug, serde::Deserialize)]
pub struct Sample {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Debug, serde::Deserialize)]
pub struct Family {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub help: String,
    pub samples: Vec<Sample>,
}

/// Parses `text` with the Prometheus project's Python parser
/// (`tests/api/prometheus_parse.py`); fails the test if it does not parse.
pub fn parse(text: &str) -> Vec<Family> {
    let python = python();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/api/prometheus_parse.py");
    let mut child = Command::new(&python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{python} must be installed for the metrics tests: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'prometheus_client'"),
        "the metrics tests need Prometheus' Python client: scripts/test.sh installs it \
         (scripts/ensure-prometheus-client.sh)"
    );
    assert!(
        out.status.success(),
        "Prometheus' parser refused /metrics: {stderr}\n{text}"
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The value of the sample `name` whose labels include `labels`, if one.
pub fn value(families: &[Family], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    families
        .iter()
        .flat_map(|f| &f.samples)
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

/// The same, failing the test when there is no such sample.
fn must(families: &[Family], name: &str, labels: &[(&str, &str)]) -> f64 {
    value(families, name, labels).unwrap_or_else(|| panic!("no {name} {labels:?}"))
}

/// Waits, scraping every 100 ms for at most `within`, until each series
/// (without labels) in `want` has its value.
async fn wait_for_metrics(app: &TestApp, what: &str, within: Duration, want: &[(&str, f64)]) {
    eventually_every(what, within, Duration::from_millis(100), async || {
        let families = parse(&metrics_text(&app.client, &app.address).await);
        let seen: Vec<f64> = want
            .iter()
            .map(|(name, _)| must(&families, name, &[]))
            .collect();
        done_if(want.iter().zip(&seen).all(|((_, v), s)| v == s), seen)
    })
    .await;
}

/// What every family must be, beyond parsing: documented, typed, counters
/// named `_total`, histograms cumulative with `+Inf` equal to `_count`.
fn check_conventions(families: &[Family]) {
    for family in families {
        assert!(!family.help.is_empty(), "{} has no HELP", family.name);
        assert!(
            ["counter", "gauge", "histogram"].contains(&family.kind.as_str()),
            "{} is {}",
            family.name,
            family.kind
        );
        if family.kind == "counter" {
            for s in &family.samples {
                assert!(s.name.ends_with("_total"), "counter sample {}", s.name);
            }
        }
        if family.kind != "histogram" {
            continue;
        }
        let mut series: std::collections::BTreeMap<String, Vec<&Sample>> = Default::default();
        for s in &family.samples {
            let mut key = s.labels.clone();
            key.remove("le");
            series.entry(format!("{key:?}")).or_default().push(s);
        }
        for (labels, samples) in series {
            let buckets: Vec<&&Sample> = samples
                .iter()
                .filter(|s| s.name.ends_with("_bucket"))
                .collect();
            assert!(buckets.len() > 2, "{} {labels}", family.name);
            for pair in buckets.windows(2) {
                assert!(
                    pair[0].value <= pair[1].value,
                    "{} {labels} not cumulative",
                    family.name
                );
            }
            let last = buckets.last().unwrap();
            assert_eq!(last.labels["le"], "+Inf");
            let count = samples
                .iter()
                .find(|s| s.name.ends_with("_count"))
                .expect("_count");
            assert_eq!(last.value, count.value, "{} {labels}", family.name);
            assert!(samples.iter().any(|s| s.name.ends_with("_sum")));
        }
    }
}

async fn post_raw(app: &TestApp, body: &str) -> reqwest::Response {
    app.client
        .post(format!("{}/graphql", app.address))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn metrics_parse_with_prometheus_own_parser_and_follow_the_traffic() {
    if needed(
        "metrics_parse_with_prometheus_own_parser_and_follow_the_traffic",
        Program::PrometheusParser,
    )
    .is_none()
    {
        return;
    }
    // Not `spawn_app`, whose wait for the first pass reads `/health`.
    let app = spawn_app_with(|_| {}).await;
    let front = "query FrontPage { articles(order: SCORE, page: 1, pageSize: 5) { id } }";
    // Twice: executed, then answered from the response cache.
    app.gql_ok(front, json!({}), None).await;
    app.gql_ok(front, json!({}), None).await;
    app.gql_ok("{ articleCount }", json!({}), None).await;
    let refused = app
        .gql(
            "mutation Vote { vote(articleId: \"1\") { votes } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(crate::helpers::error_code(&refused), "UNAUTHENTICATED");
    let syntax = app.gql("{ articles(", json!({}), None).await;
    assert_eq!(crate::helpers::error_code(&syntax), "GRAPHQL_PARSE_FAILED");
    assert_eq!(post_raw(&app, "{not json").await.status(), 400);

    // A live subscription, and a vote it hears about through pub/sub.
    let mut socket = WsClient::connect(&app, TRANSPORT_WS).await;
    socket
        .subscribe("1", "subscription { scoreChanged { votes } }", json!({}))
        .await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let article = app.post(&alice, "counted", &[]).await;
    let voted = app.vote(&bob, article["id"].as_str().unwrap()).await;
    assert!(voted.get("errors").is_none(), "{voted}");
    assert_eq!(socket.next_event().await["scoreChanged"]["votes"], 2);
    let health = app
        .client
        .get(format!("{}/health", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    let text = metrics_text(&app.client, &app.address).await;
    let families = parse(&text);
    check_conventions(&families);
    let outbox = value(&families, "votegraph_outbox_entries", &[("shard", "0")]);
    assert_eq!(outbox, None, "one primary has no outbox");
    let graphql = |kind: &str, operation: &str, code: &str| {
        value(
            &families,
            "votegraph_graphql_requests_total",
            &[("type", kind), ("operation", operation), ("code", code)],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(graphql("query", "FrontPage", "OK"), 2.0, "{text}");
    assert_eq!(graphql("query", "<anonymous>", "OK"), 1.0);
    assert_eq!(graphql("mutation", "Vote", "UNAUTHENTICATED"), 1.0);
    assert_eq!(graphql("none", "<none>", "GRAPHQL_PARSE_FAILED"), 1.0);
    assert_eq!(graphql("none", "<none>", "BAD_REQUEST"), 1.0);
    // Sign-ups, a post and a vote, all anonymous operations.
    assert_eq!(graphql("mutation", "<anonymous>", "OK"), 4.0);
    let graphql_requests: f64 = families
        .iter()
        .flat_map(|f| &f.samples)
        .filter(|s| s.name == "votegraph_graphql_requests_total")
        .map(|s| s.value)
        .sum();
    assert_eq!(graphql_requests, 10.0);
    assert_eq!(
        must(
            &families,
            "votegraph_graphql_request_duration_seconds_count",
            &[("type", "query")]
        ),
        3.0
    );
    assert_eq!(
        must(
            &families,
            "votegraph_http_requests_total",
            &[("route", "health"), ("status", "200")]
        ),
        1.0
    );
    assert_eq!(
        must(
            &families,
            "votegraph_http_requests_total",
            &[("route", "graphql"), ("status", "101")]
        ),
        1.0,
        "the WebSocket upgrade"
    );
    assert_eq!(
        must(
            &families,
            "votegraph_http_requests_total",
            &[("route", "graphql"), ("status", "400")]
        ),
        1.0
    );
    let hit = [("result", "hit")];
    assert!(must(&families, "votegraph_response_cache_requests_total", &hit) >= 1.0);
    assert!(must(&families, "votegraph_document_cache_requests_total", &hit) >= 1.0);
    assert!(must(&families, "votegraph_document_cache_entries", &[]) >= 2.0);
    // The post since emptied the response cache.
    assert_eq!(
        must(&families, "votegraph_response_cache_entries", &[]),
        0.0
    );
    assert!(
        must(
            &families,
            "votegraph_response_cache_invalidations_total",
            &[]
        ) >= 1.0
    );
    assert!(
        must(
            &families,
            "votegraph_redis_command_duration_seconds_count",
            &[("kind", "command")]
        ) >= 5.0
    );
    assert_eq!(
        must(
            &families,
            "votegraph_redis_errors_total",
            &[("kind", "connection")]
        ),
        0.0
    );
    assert!(must(&families, "votegraph_redis_pool_connections", &[]) >= 1.0);
    assert_eq!(
        must(&families, "votegraph_redis_pool_max_connections", &[]),
        8.0
    );
    assert_eq!(must(&families, "votegraph_websocket_connections", &[]), 1.0);
    assert_eq!(must(&families, "votegraph_subscriptions", &[]), 1.0);
    // The post's event and the vote's.
    assert_eq!(must(&families, "votegraph_pubsub_events_total", &[]), 2.0);
    assert_eq!(must(&families, "votegraph_pubsub_connected", &[]), 1.0);
    assert_eq!(
        must(&families, "votegraph_pubsub_reconnections_total", &[]),
        0.0
    );
    assert!(must(&families, "process_resident_memory_bytes", &[]) > 1e6);

    socket.close().await;
    // The closed socket leaves both gauges.
    wait_for_metrics(
        &app,
        "the closed WebSocket to be no longer counted",
        Duration::from_secs(5),
        &[
            ("votegraph_websocket_connections", 0.0),
            ("votegraph_subscriptions", 0.0),
        ],
    )
    .await;
}

#[tokio::test]
async fn operation_names_past_the_first_hundred_share_one_series() {
    if needed(
        "operation_names_past_the_first_hundred_share_one_series",
        Program::PrometheusParser,
    )
    .is_none()
    {
        return;
    }
    let app = spawn_app().await;
    for i in 0..105 {
        app.gql_ok(&format!("query Op{i} {{ articleCount }}"), json!({}), None)
            .await;
    }
    // A name already seen keeps its own series.
    app.gql_ok("query Op0 { articleCount }", json!({}), None)
        .await;
    let families = parse(&metrics_text(&app.client, &app.address).await);
    let operations: std::collections::BTreeMap<&str, f64> = families
        .iter()
        .flat_map(|f| &f.samples)
        .filter(|s| s.name == "votegraph_graphql_requests_total")
        .map(|s| (s.labels["operation"].as_str(), s.value))
        .collect();
    let named = operations.keys().filter(|k| k.starts_with("Op")).count();
    assert_eq!(named, 100, "{operations:?}");
    assert_eq!(operations["<other>"], 5.0);
    assert_eq!(operations["Op0"], 2.0);
    assert!(!operations.contains_key("Op104"));
}

#[tokio::test]
async fn redis_failures_and_pubsub_reconnections_are_counted() {
    if needed(
        "redis_failures_and_pubsub_reconnections_are_counted",
        Program::PrometheusParser,
    )
    .is_none()
    {
        return;
    }
    let mut app = spawn_app().await;
    app.gql_ok("{ articleCount }", json!({}), None).await;
    app.redis.stop();
    let body = app
        .gql(
            "mutation { signUp(name: \"carol\", password: \"password1\") { token } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(crate::helpers::error_code(&body), "INTERNAL");
    let families = parse(&metrics_text(&app.client, &app.address).await);
    let failures = must(
        &families,
        "votegraph_redis_errors_total",
        &[("kind", "connection")],
    ) + must(
        &families,
        "votegraph_redis_pool_checkouts_total",
        &[("outcome", "timed_out")],
    );
    assert!(failures >= 1.0, "the failed request shows");

    app.redis.restart().await;
    wait_for_metrics(
        &app,
        "pub/sub to reconnect and be counted once",
        Duration::from_secs(10),
        &[
            ("votegraph_pubsub_reconnections_total", 1.0),
            ("votegraph_pubsub_connected", 1.0),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_scrape_makes_no_redis_call() {
    let app = spawn_app().await;
    app.gql_ok("{ articleCount }", json!({}), None).await;
    let mut conn = app.redis.conn().await;
    app.wait_for_derivations().await;
    let before = reads_processed(&mut conn).await;
    for _ in 0..5 {
        metrics_text(&app.client, &app.address).await;
    }
    let after = reads_processed(&mut conn).await;
    // The second INFO is the one read in between.
    assert_eq!(after - before, 1, "/metrics reached Redis");
}

#[tokio::test]
async fn metrics_are_not_served_through_a_proxy_but_on_their_own_listener() {
    if needed(
        "metrics_are_not_served_through_a_proxy_but_on_their_own_listener",
        Program::PrometheusParser,
    )
    .is_none()
    {
        return;
    }
    let app = spawn_app_with(|s| s.metrics_bind = Some("127.0.0.1:0".into())).await;
    // Through a proxy (it adds X-Forwarded-For), the API's port hides them.
    for header in ["x-forwarded-for", "forwarded", "x-real-ip"] {
        let proxied = app
            .client
            .get(format!("{}/metrics", app.address))
            .header(header, "for=203.0.113.9")
            .send()
            .await
            .unwrap();
        assert_eq!(proxied.status(), 404, "{header}");
        let body: Value = proxied.json().await.unwrap();
        assert_eq!(body["errors"][0]["extensions"]["code"], "NOT_FOUND");
    }
    // The metrics listener serves whoever reaches it, and only /metrics.
    let port = app.metrics_port.expect("a metrics listener");
    let metrics = format!("http://127.0.0.1:{port}");
    let scraped = app
        .client
        .get(format!("{metrics}/metrics"))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_eq!(scraped.status(), 200);
    let families = parse(&scraped.text().await.unwrap());
    assert!(value(
        &families,
        "votegraph_http_requests_total",
        &[("route", "metrics"), ("status", "404")]
    )
    .is_some());
    let graphql = app
        .client
        .get(format!("{metrics}/graphql?query=%7BarticleCount%7D"))
        .send()
        .await
        .unwrap();
    assert_eq!(graphql.status(), 404);
}

#[tokio::test]
async fn behind_trusted_proxies_the_api_port_serves_metrics_only_when_told_to() {
    // A local proxy that forwards without a forwarding header looks like
    // a direct loopback client: behind trusted proxies the API port keeps
    // /metrics to itself.
    let app = spawn_app_with(|s| s.trusted_proxies = "127.0.0.1".parse().unwrap()).await;
    let direct = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 404);
    let body: Value = direct.json().await.unwrap();
    assert_eq!(body["errors"][0]["extensions"]["code"], "NOT_FOUND");
    // --metrics-on-api-port allows direct loopback clients again.
    let allowed = spawn_app_with(|settings| {
        settings.trusted_proxies = "127.0.0.1".parse().unwrap();
        settings.metrics_on_api_port = true;
    })
    .await;
    metrics_text(&allowed.client, &allowed.address).await;
    let proxied = allowed
        .client
        .get(format!("{}/metrics", allowed.address))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_eq!(
        proxied.status(),
        404,
        "still not through a proxy that says so"
    );
}
