//! Automatic persisted queries (Apollo's protocol): an unknown hash is
//! `PERSISTED_QUERY_NOT_FOUND`, the text registers it (verified), then the
//! hash alone works over GET, from any instance, with no Redis round trip
//! once warm; Redis keeps a bounded number of documents, with expiry. And
//! a real Apollo Client does the whole exchange.

use std::process::Command;

use redis::AsyncCommands;
use serde_json::{json, Value};
use sha2::Digest;

use crate::helpers::{
    error_code, info_field, needed, spawn_app, spawn_app_with, spawn_server, test_settings,
    Program, TestApp,
};

fn sha256(text: &str) -> String {
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

fn persisted(hash: &str) -> Value {
    json!({ "persistedQuery": { "version": 1, "sha256Hash": hash } })
}

/// A GET with only the hash (and optional variables); (status, body).
async fn get_hash(
    client: &reqwest::Client,
    address: &str,
    hash: &str,
    accept: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut request = client
        .get(format!("{address}/graphql"))
        .query(&[("extensions", persisted(hash).to_string())]);
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().await.unwrap())
}

/// POSTs `body`; (status, body).
async fn post(app: &TestApp, body: Value, token: Option<&str>) -> (u16, Value) {
    let mut request = app
        .client
        .post(format!("{}/graphql", app.address))
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn an_unknown_hash_is_registered_by_its_text_then_served_by_hash_alone() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    app.post(&token, "persisted", &[]).await;
    let query = "query Front { articles { id title } articleCount }";
    let hash = sha256(query);

    // Unknown: the error Apollo clients wait for (200 under JSON, 404
    // under the GraphQL media type), never cacheable.
    let (status, headers, body) = get_hash(&app.client, &app.address, &hash, None).await;
    assert_eq!(status, 200);
    assert_eq!(error_code(&body), "PERSISTED_QUERY_NOT_FOUND");
    assert_eq!(body["errors"][0]["message"], "PersistedQueryNotFound");
    assert!(body.get("data").is_none());
    assert_eq!(headers["cache-control"], "private, no-store");
    let accept = Some("application/graphql-response+json");
    let (status, _, body) = get_hash(&app.client, &app.address, &hash, accept).await;
    assert_eq!(
        (status, error_code(&body)),
        (404, "PERSISTED_QUERY_NOT_FOUND")
    );

    // A text that does not hash to the hash is refused, and registers nothing.
    let (status, body) = post(
        &app,
        json!({ "query": "{ articleCount }", "extensions": persisted(&hash) }),
        None,
    )
    .await;
    assert_eq!((status, error_code(&body)), (400, "BAD_REQUEST"));
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("SHA-256"));
    for bad in [
        json!({ "persistedQuery": { "version": 2, "sha256Hash": hash } }),
        json!({ "persistedQuery": { "version": 1, "sha256Hash": "abc" } }),
    ] {
        let (status, body) = post(&app, json!({ "query": query, "extensions": bad }), None).await;
        assert_eq!((status, error_code(&body)), (400, "BAD_REQUEST"), "{body}");
    }
    let mut redis = app.redis.conn().await;
    let stored: Vec<String> = redis.keys("document:*").await.unwrap();
    assert!(stored.is_empty(), "{stored:?}");

    // The text with its hash: answered and registered.
    let (status, body) = post(
        &app,
        json!({ "query": query, "extensions": persisted(&hash) }),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["data"]["articleCount"], 1, "{body}");
    let text: String = redis.get(format!("document:{hash}")).await.unwrap();
    assert_eq!(text, query);
    let ttl: i64 = redis.ttl(format!("document:{hash}")).await.unwrap();
    assert!(ttl > 86_000 && ttl <= 86_400, "{ttl}");

    // Now the hash alone: a short URL with the anonymous caching headers.
    let (status, headers, by_hash) = get_hash(&app.client, &app.address, &hash, None).await;
    assert_eq!(status, 200);
    assert_eq!(by_hash, body);
    assert_eq!(
        headers["cache-control"],
        "public, max-age=1, stale-while-revalidate=10"
    );
    assert!(headers.get("etag").is_some());
    // By POST too, and from another instance on the same Redis.
    let (_, body) = post(&app, json!({ "extensions": persisted(&hash) }), None).await;
    assert_eq!(body["data"]["articleCount"], 1);
    let other = spawn_server(test_settings(&app.redis)).await;
    let (status, _, body) = get_hash(&app.client, &other.address, &hash, None).await;
    assert_eq!((status, &body["data"]["articleCount"]), (200, &json!(1)));

    // A persisted mutation runs by POST, never by GET.
    let mutation = "mutation { logOut }";
    let hash = sha256(mutation);
    let registered = json!({ "query": mutation, "extensions": persisted(&hash) });
    let (_, body) = post(&app, registered, Some(&token)).await;
    assert_eq!(body["data"]["logOut"], true, "{body}");
    let (_, body) = post(
        &app,
        json!({ "extensions": persisted(&hash) }),
        Some(&token),
    )
    .await;
    assert_eq!(body["data"]["logOut"], false, "already logged out: {body}");
    let (status, _, body) = get_hash(&app.client, &app.address, &hash, None).await;
    assert_eq!((status, error_code(&body)), (405, "METHOD_NOT_ALLOWED"));
}

#[tokio::test]
async fn a_warm_hash_is_served_from_memory_and_a_cold_one_from_redis_once() {
    let app = spawn_app().await;
    let query = "{ articleCount }";
    let hash = sha256(query);
    post(
        &app,
        json!({ "query": query, "extensions": persisted(&hash) }),
        None,
    )
    .await;
    let stats = |address: String| {
        let client = app.client.clone();
        async move { crate::helpers::health_at(&client, &address).await["persistedQueries"].clone() }
    };

    // The registering instance knows the text.
    for _ in 0..5 {
        let (_, _, body) = get_hash(&app.client, &app.address, &hash, None).await;
        assert_eq!(body["data"]["articleCount"], 0);
    }
    assert_eq!(stats(app.address.clone()).await["localHits"], 5);

    // A cold instance reads Redis once, then not again.
    let other = spawn_server(test_settings(&app.redis)).await;
    for _ in 0..5 {
        let (_, _, body) = get_hash(&app.client, &other.address, &hash, None).await;
        assert_eq!(body["data"]["articleCount"], 0);
    }
    let other_stats = stats(other.address.clone()).await;
    assert_eq!(other_stats["redisHits"], 1, "{other_stats}");
    assert_eq!(other_stats["localHits"], 4, "{other_stats}");
}

#[tokio::test]
async fn redis_keeps_a_bounded_number_of_documents_with_expiry() {
    let app = spawn_app_with(|settings| {
        settings.persisted_queries_max = 5;
        settings.persisted_query_ttl_secs = 600;
        settings.documents.max_query_bytes = 2_000;
    })
    .await;
    let mut redis = app.redis.conn().await;
    let queries: Vec<String> = (0..12)
        .map(|i| format!("{{ q{i}: articleCount }}"))
        .collect();
    for query in &queries {
        let (_, body) = post(
            &app,
            json!({ "query": query, "extensions": persisted(&sha256(query)) }),
            None,
        )
        .await;
        assert_eq!(body["data"].as_object().unwrap().len(), 1, "{body}");
        let count: u64 = redis.zcard("document:registered").await.unwrap();
        assert!(count <= 5, "{count} documents kept");
    }
    let mut kept: Vec<String> = redis.keys("document:*").await.unwrap();
    kept.retain(|k| k != "document:registered");
    kept.sort();
    let mut newest: Vec<String> = queries[7..]
        .iter()
        .map(|q| format!("document:{}", sha256(q)))
        .collect();
    newest.sort();
    assert_eq!(kept, newest, "the five newest are kept, the rest deleted");
    for key in &kept {
        let ttl: i64 = redis.ttl(key).await.unwrap();
        assert!(ttl > 0 && ttl <= 600, "{key}: {ttl}");
    }
    // An instance that never saw them finds the newest, not the oldest.
    let other = spawn_server({
        let mut settings = test_settings(&app.redis);
        settings.persisted_queries_max = 5;
        settings
    })
    .await;
    let (_, _, body) = get_hash(&app.client, &other.address, &sha256(&queries[11]), None).await;
    assert_eq!(body["data"]["q11"], 0, "{body}");
    let (_, _, body) = get_hash(&app.client, &other.address, &sha256(&queries[0]), None).await;
    assert_eq!(error_code(&body), "PERSISTED_QUERY_NOT_FOUND");

    // A document over the size limit is refused before it is registered.
    let big = format!("{{ articleCount }} #{}", "x".repeat(2_000));
    let (_, body) = post(
        &app,
        json!({ "query": big, "extensions": persisted(&sha256(&big)) }),
        None,
    )
    .await;
    assert_eq!(error_code(&body), "QUERY_TOO_COMPLEX");
    let exists: bool = redis
        .exists(format!("document:{}", sha256(&big)))
        .await
        .unwrap();
    assert!(!exists);

    // A registration past its TTL is pruned from the index.
    let () = redis
        .zadd("document:registered", "document:stale", 1)
        .await
        .unwrap();
    let query = "{ fresh: articleCount }";
    post(
        &app,
        json!({ "query": query, "extensions": persisted(&sha256(query)) }),
        None,
    )
    .await;
    let stale: Option<f64> = redis
        .zscore("document:registered", "document:stale")
        .await
        .unwrap();
    assert_eq!(stale, None);
}

/// `tests/apollo`, with its `node_modules` installed (`npm ci` the first
/// time, from the committed lock file).
fn apollo_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apollo");
    if !dir.join("node_modules/@apollo/client").exists() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .expect("node and npm must be installed for the Apollo Client test");
        assert!(status.success(), "npm ci in tests/apollo failed");
    }
    dir
}

#[tokio::test]
async fn a_real_apollo_client_misses_registers_and_then_reads_over_get() {
    if needed(
        "a_real_apollo_client_misses_registers_and_then_reads_over_get",
        Program::Node,
    )
    .is_none()
    {
        return;
    }
    let dir = tokio::task::spawn_blocking(apollo_dir).await.unwrap();
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    for i in 0..3 {
        app.post(&token, &format!("apollo {i}"), &[]).await;
    }
    let url = format!("{}/graphql", app.address);
    let output = tokio::process::Command::new("node")
        .arg(dir.join("apq.mjs"))
        .arg(&url)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), output)
        .await
        .expect("the Apollo script finished")
        .expect("node runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let exchanges = report["exchanges"].as_array().unwrap();
    let summary: Vec<(String, u64)> = exchanges
        .iter()
        .map(|e| {
            (
                e["method"].as_str().unwrap().to_owned(),
                e["status"].as_u64().unwrap(),
            )
        })
        .collect();
    // Miss by GET, register by POST, then (a fresh client) hit by GET.
    assert_eq!(
        summary,
        [
            ("GET".to_owned(), 404),
            ("POST".to_owned(), 200),
            ("GET".to_owned(), 200)
        ],
        "{report}"
    );
    let miss = &exchanges[0];
    assert!(
        !miss["url"].as_str().unwrap().contains("query="),
        "hash only"
    );
    assert!(miss["body"]
        .as_str()
        .unwrap()
        .contains("PERSISTED_QUERY_NOT_FOUND"));
    assert!(exchanges[1]["requestBody"]
        .as_str()
        .unwrap()
        .contains("\"query\""));
    let hit = &exchanges[2];
    assert!(
        !hit["url"].as_str().unwrap().contains("query="),
        "hash only"
    );
    assert_eq!(hit["contentType"], "application/graphql-response+json");
    assert_eq!(
        hit["cacheControl"],
        "public, max-age=1, stale-while-revalidate=10"
    );
    // Both clients got the page.
    for result in report["results"].as_array().unwrap() {
        assert!(result["error"].is_null(), "{result}");
        assert_eq!(result["data"]["articleCount"], 3);
        assert_eq!(result["data"]["articles"].as_array().unwrap().len(), 3);
    }
    // The document Apollo registered is in Redis under its hash.
    let mut redis = app.redis.conn().await;
    let mut keys: Vec<String> = redis.keys("document:*").await.unwrap();
    keys.retain(|k| k != "document:registered");
    assert_eq!(keys.len(), 1, "{keys:?}");
    let text: String = redis.get(&keys[0]).await.unwrap();
    assert_eq!(keys[0], format!("document:{}", sha256(&text)));
}

/// Registers `query` (its text and hash) as the client `from` (through a
/// trusted proxy's `X-Forwarded-For`); (status, Retry-After, body).
async fn register_from(app: &TestApp, from: &str, query: &str) -> (u16, Option<String>, Value) {
    let response = app
        .client
        .post(format!("{}/graphql", app.address))
        .header("x-forwarded-for", from)
        .json(&json!({ "query": query, "extensions": persisted(&sha256(query)) }))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry, response.json().await.unwrap())
}

async fn stored(app: &TestApp, query: &str) -> bool {
    let mut conn = app.redis.conn().await;
    conn.exists(format!("document:{}", sha256(query)))
        .await
        .unwrap()
}

#[tokio::test]
async fn registrations_are_limited_per_address_and_for_the_whole_site() {
    let app = spawn_app_with(|s| {
        s.trusted_proxies = "127.0.0.1".parse().unwrap();
        s.rate_persisted_query = "3/600".parse().unwrap();
        s.rate_persisted_query_site = "5/600".parse().unwrap();
    })
    .await;
    let doc = |i: usize| format!("{{ articleCount }} # document {i}");
    for i in 0..3 {
        let (status, _, body) = register_from(&app, "10.0.0.1", &doc(i)).await;
        assert_eq!(
            (status, body["data"]["articleCount"].clone()),
            (200, json!(0)),
            "{body}"
        );
    }
    // The address' fourth new document is refused and not kept.
    let (status, retry, body) = register_from(&app, "10.0.0.1", &doc(3)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(error_code(&body), "RATE_LIMITED");
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("persisted-query registrations from this address"),
        "{message}"
    );
    assert!(retry.is_some_and(|s| s.parse::<u64>().unwrap() > 0));
    assert!(body.get("data").is_none(), "nothing ran: {body}");
    assert!(
        !stored(&app, &doc(3)).await,
        "a refused registration writes nothing"
    );
    let (_, _, body) = get_hash(&app.client, &app.address, &sha256(&doc(3)), None).await;
    assert_eq!(error_code(&body), "PERSISTED_QUERY_NOT_FOUND");
    // A document it already registered is not counted again.
    let (status, _, body) = register_from(&app, "10.0.0.1", &doc(0)).await;
    assert_eq!(status, 200, "{body}");
    // Other addresses have their own budget, until the site's is spent.
    for (i, from) in [(4, "10.0.0.2"), (5, "10.0.0.3")] {
        let (status, _, body) = register_from(&app, from, &doc(i)).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _, body) = register_from(&app, "10.0.0.4", &doc(6)).await;
    assert_eq!((status, error_code(&body)), (429, "RATE_LIMITED"), "{body}");
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("from all clients"), "{message}");
    assert!(!stored(&app, &doc(6)).await);
    // Plain queries are not registrations: the same text runs without one.
    let (status, body) = post(&app, json!({ "query": doc(6) }), None).await;
    assert_eq!(
        (status, body["data"]["articleCount"].clone()),
        (200, json!(0))
    );
}

#[tokio::test]
async fn registrations_stop_before_redis_is_full_and_never_starve_users_writes() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    let article = app.post(&token, "before", &[]).await;
    let mut admin = app.redis.conn().await;
    let used = info_field(&mut admin, "memory", "used_memory").await;
    // Room for about 1.5 MB more: registrations stop at 80 % of it.
    let max = used + 1_500_000;
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(max)
        .query_async(&mut admin)
        .await
        .unwrap();
    let padding = "x".repeat(30_000);
    let mut refused = None;
    for i in 0..200 {
        let query = format!("{{ articleCount }} # {i} {padding}");
        let (status, retry, body) = register_from(&app, "127.0.0.1", &query).await;
        if status != 200 {
            refused = Some((i, status, retry, body, query));
            break;
        }
    }
    let (kept, status, retry, body, query) = refused.expect("registrations stop");
    assert!(kept > 5, "some documents were registered first ({kept})");
    assert_eq!(
        (status, error_code(&body)),
        (503, "SERVICE_UNAVAILABLE"),
        "{body}"
    );
    assert_eq!(retry.as_deref(), Some("60"));
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("without extensions.persistedQuery"));
    assert!(!stored(&app, &query).await);
    // Users' writes still have room.
    let voter = app.sign_up("bob").await;
    let vote = app.vote(&voter, article["id"].as_str().unwrap()).await;
    assert_eq!(vote["data"]["vote"]["votes"], 2, "{vote}");
    let posted = app
        .gql_ok(
            "mutation { post(title: \"after\", link: \"https://example.com/\") { id } }",
            json!({}),
            Some(&token),
        )
        .await;
    assert!(posted["post"]["id"].is_string(), "{posted}");
}
