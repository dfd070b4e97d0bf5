//! The process-wide work budget: queries and mutations are admitted for
//! their cost against one budget; one that finds no room in time gets
//! SERVICE_UNAVAILABLE (503, `Retry-After`), never INTERNAL; small ones
//! keep a reserve; and many concurrent maximum-cost queries keep the
//! process' memory bounded.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{
    error_code, needed, pause_redis, poll_until, spawn_app_with, Binary, Program, TestApp,
    TestRedis, WsClient, TRANSPORT_WS,
};
use crate::metrics::{metrics_text, parse, value};

/// Cost 400 (four lists of 100): a large request for a budget of 1,000,
/// whose reserve for small ones is 100.
const LARGE: &str = "{ a: articles(pageSize: 100) { id } b: articles(pageSize: 100) { id } c: articles(pageSize: 100) { id } d: articles(pageSize: 100) { id } }";

async fn post(app: &TestApp, query: &str) -> reqwest::Response {
    app.client
        .post(format!("{}/graphql", app.address))
        .json(&json!({ "query": query }))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_request_without_room_waits_then_is_refused_with_503_while_small_ones_run() {
    if needed(
        "a_request_without_room_waits_then_is_refused_with_503_while_small_ones_run",
        Program::PrometheusParser,
    )
    .is_none()
    {
        return;
    }
    let app = spawn_app_with(|s| {
        s.budget.work_budget = 1_000;
        s.budget.work_wait_ms = 300;
        s.redis_timeout_ms = 5_000;
    })
    .await;
    let token = app.sign_up("alice").await;
    for i in 0..3 {
        app.post(&token, &format!("article {i}"), &[]).await;
    }
    // Redis holds every command for a while: admitted requests keep their
    // units meanwhile.
    let mut admin = app.redis.conn().await;
    pause_redis(&mut admin, 1_500).await;
    let held: Vec<_> = (0..2)
        .map(|i| {
            let app_query = format!("{LARGE} # {i}");
            let client = app.client.clone();
            let url = format!("{}/graphql", app.address);
            tokio::spawn(async move {
                client
                    .post(url)
                    .json(&json!({ "query": app_query }))
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A third large request finds no room: refused after its wait.
    let refused = post(&app, &format!("{LARGE} # 3")).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(error_code(&body), "SERVICE_UNAVAILABLE", "{body}");
    assert_eq!(body["errors"][0]["extensions"]["retryAfter"], 1);
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("busy"));
    // A small one still fits in the reserve and runs once Redis answers.
    let small: Value = post(&app, "{ articles(pageSize: 3) { id } } # small")
        .await
        .json()
        .await
        .unwrap();
    assert!(small["errors"].is_null(), "{small}");
    assert_eq!(small["data"]["articles"].as_array().unwrap().len(), 3);
    for request in held {
        let body = request.await.unwrap();
        assert!(body["errors"].is_null(), "admitted requests ran: {body}");
    }
    // Over a WebSocket too: a query that finds no room is refused.
    pause_redis(&mut admin, 1_000).await;
    let blocker = {
        let client = app.client.clone();
        let url = format!("{}/graphql", app.address);
        tokio::spawn(async move {
            for i in 0..2 {
                let _ = client
                    .post(&url)
                    .json(&json!({ "query": format!("{LARGE} # ws {i}") }))
                    .send()
                    .await;
            }
        })
    };
    let both = futures_util::future::join_all((0..2).map(|i| {
        let client = app.client.clone();
        let url = format!("{}/graphql", app.address);
        async move {
            client
                .post(url)
                .json(&json!({ "query": format!("{LARGE} # hold {i}") }))
                .send()
                .await
        }
    }));
    let mut ws = WsClient::connect(&app, TRANSPORT_WS).await;
    let (_, answer) = futures_util::join!(both, async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        ws.subscribe("1", &format!("{LARGE} # over ws"), json!({}))
            .await;
        ws.next_raw().await
    });
    assert_eq!(
        answer["payload"]["errors"][0]["extensions"]["code"], "SERVICE_UNAVAILABLE",
        "{answer}"
    );
    blocker.await.unwrap();
    let families = parse(&metrics_text(&app.client, &app.address).await);
    assert_eq!(
        value(&families, "votegraph_work_budget_units", &[]),
        Some(1_000.0)
    );
    assert!(value(&families, "votegraph_work_refused_total", &[]).unwrap() >= 2.0);
    assert!(value(&families, "votegraph_work_admitted_total", &[]).unwrap() >= 3.0);
    assert_eq!(
        value(&families, "votegraph_work_in_flight_units", &[]),
        Some(0.0)
    );
    assert_eq!(
        value(&families, "votegraph_work_waiting_requests", &[]),
        Some(0.0)
    );
}

fn rss_mib(server: &Binary) -> u64 {
    server.rss_kib() / 1024
}

/// The largest legal query: 50 aliases × a page of 100 articles with every
/// field and the poster, cost 10,000.
fn max_cost_query(variant: usize) -> String {
    let fields =
        "id title link postedAt votes score groups downvotes slug views poster { name karma }";
    let aliases: Vec<String> = (0..50)
        .map(|i| format!("a{i}: articles(page: 1, pageSize: 100) {{ {fields} }}"))
        .collect();
    format!("{{ {} }} # {variant}", aliases.join(" "))
}

#[tokio::test]
async fn forty_concurrent_maximum_cost_queries_keep_memory_bounded() {
    let redis = TestRedis::start().await;
    let server = Binary::start(
        &redis.url(),
        &[
            ("VOTEGRAPH_RATE_POST", "1000000/60"),
            ("VOTEGRAPH_RATE_SIGN_UP", "1000000/60"),
            ("VOTEGRAPH_RESPONSE_CACHE_BYTES", "4194304"),
            // A debug build among the whole suite's tests is ten times
            // slower than a release build alone: Redis replies wait longer.
            ("VOTEGRAPH_POOL_TIMEOUT_MS", "5000"),
            ("VOTEGRAPH_REDIS_TIMEOUT_MS", "5000"),
            ("VOTEGRAPH_REQUEST_TIMEOUT_MS", "60000"),
        ],
    )
    .await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let url = format!("{}/graphql", server.address);
    for u in 0..4 {
        let token = crate::helpers::sign_up_at(&client, &server.address, &format!("user{u}")).await;
        for a in 0..25 {
            let body: Value = client
                .post(&url)
                .bearer_auth(&token)
                .json(&json!({
                    "query": "mutation($t: String!, $l: String!) { post(title: $t, link: $l, groups: [\"g\"]) { id } }",
                    "variables": {
                        "t": format!("article {u}-{a} {}", "x".repeat(100)),
                        "l": format!("https://example.com/{u}/{a}"),
                    }
                }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert!(body["errors"].is_null(), "{body}");
        }
    }
    let cost: Value = client
        .post(&url)
        .header("x-query-cost", "1")
        .json(&json!({ "query": max_cost_query(0) }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        cost["extensions"]["cost"]["requested"], 10_000,
        "legal, at the limit"
    );
    let idle = rss_mib(&server);
    let storm = futures_util::future::join_all((1..=40).map(|i| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let response = client
                .post(&url)
                .json(&json!({ "query": max_cost_query(i) }))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let retry_after = response.headers().get("retry-after").cloned();
            let body: Value = response.json().await.unwrap();
            (status, retry_after, body)
        }
    }));
    let done = std::sync::atomic::AtomicBool::new(false);
    let storm = async {
        let answers = storm.await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        answers
    };
    // Peak memory, and small queries answered all along.
    let watch = async {
        let (mut peak, mut small) = (idle, Vec::new());
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            peak = peak.max(rss_mib(&server));
            let body: Value = client
                .post(&url)
                .json(&json!({ "query": "{ articleCount }" }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            small.push(body);
            peak = peak.max(rss_mib(&server));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (peak, small)
    };
    let (answers, (peak, small)) = tokio::join!(storm, watch);
    let mut served = 0;
    for (status, retry_after, body) in &answers {
        if body["errors"].is_null() {
            assert_eq!(*status, 200);
            assert_eq!(body["data"]["a49"].as_array().map(Vec::len), Some(100));
            served += 1;
        } else {
            // Never INTERNAL or TIMEOUT: a clear "come back".
            let first = &body["errors"][0];
            assert_eq!(
                first["extensions"]["code"], "SERVICE_UNAVAILABLE",
                "{first}"
            );
            assert_eq!(*status, 503);
            assert_eq!(retry_after.as_ref().map(|v| v.to_str().unwrap()), Some("1"));
        }
    }
    assert!(served >= 1, "some of the storm is served");
    assert!(!small.is_empty());
    for body in &small {
        assert!(
            body["errors"].is_null(),
            "small queries run during the storm: {body}"
        );
    }
    assert!(
        peak - idle <= 400,
        "40 concurrent maximum-cost queries grew the process by {} MiB (idle {idle} MiB)",
        peak - idle
    );
    // The memory goes back near its idle level (plus the 4 MiB cache).
    let settled = poll_until(
        Duration::from_secs(15),
        Duration::from_millis(100),
        async || {
            let rss = rss_mib(&server);
            if rss <= idle + 64 {
                Ok(rss)
            } else {
                Err(rss)
            }
        },
    )
    .await
    .unwrap_or_else(|rss| rss);
    assert!(
        settled <= idle + 64,
        "after the storm the process holds {settled} MiB (idle {idle} MiB, peak {peak} MiB)"
    );
}
