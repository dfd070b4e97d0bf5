//! The attacks of docs/security.md, each run against the real server: every one
//! gets a clear error, writes and runs nothing, and leaves the server's
//! memory bounded.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::{
    error_code, eventually_every, info_field, pause_redis, spawn_app, spawn_app_with, Binary,
    TestApp, TestRedis, WsClient, TRANSPORT_WS,
};

/// Commands Redis has run so far (the INFO asking counts itself).
async fn commands_processed(conn: &mut MultiplexedConnection) -> u64 {
    info_field(conn, "stats", "total_commands_processed").await
}

fn nested(levels: usize) -> String {
    let mut q = "name".to_owned();
    for _ in 0..levels {
        q = format!("articles(pageSize: 100) {{ id title poster {{ {q} }} }}");
    }
    format!("{{ {q} }}")
}

fn fragment_bomb(levels: usize) -> String {
    let mut bomb = "{ articles(pageSize: 1) { ...B0 } }".to_owned();
    for i in 0..levels {
        bomb.push_str(&format!(
            " fragment B{i} on Article {{ poster {{ name }} ...B{} ...B{} }}",
            i + 1,
            i + 1
        ));
    }
    bomb.push_str(&format!(" fragment B{levels} on Article {{ id title }}"));
    bomb
}

async fn seeded() -> (TestApp, String) {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    for i in 0..5 {
        app.post(&token, &format!("article {i}"), &["rust"]).await;
    }
    app.wait_for_derivations().await;
    (app, token)
}

#[tokio::test]
async fn expensive_documents_are_refused_before_any_redis_command() {
    let (app, _) = seeded().await;
    let mut redis = app.redis.conn().await;
    let aliases = |n: usize| {
        let fields: String = (0..n)
            .map(|i| format!("a{i}: articles(pageSize: 100) {{ id title }} "))
            .collect();
        format!("{{ {fields} }}")
    };
    let spreads = format!(
        "{{ articles {{ {} }} }} fragment F on Article {{ id }}",
        "...F ".repeat(20_000)
    );
    let introspection_bomb =
        "{ __schema { types { fields { type { fields { type { fields { type { fields { name } } } } } } } } } }";
    let attacks = [
        ("3 nested lists", nested(3), "costs"),
        ("4 nested lists", nested(4), "costs"),
        ("500 aliases", aliases(500), "tokens"),
        ("300 aliases", aliases(300), "aliases"),
        ("fragment bomb", fragment_bomb(20), "costs"),
        ("20,000 spreads", spreads, "bytes"),
        ("introspection bomb", introspection_bomb.to_owned(), "costs"),
    ];
    for (name, query, says) in attacks {
        let before = commands_processed(&mut redis).await;
        let body = app.gql(&query, json!({}), None).await;
        let after = commands_processed(&mut redis).await;
        assert_eq!(error_code(&body), "QUERY_TOO_COMPLEX", "{name}: {body}");
        let message = body["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains(says), "{name}: {message}");
        assert!(body.get("data").is_none(), "{name}: nothing ran: {body}");
        assert_eq!(after, before + 1, "{name}: no Redis command but INFO");
    }
    // The cost message states the cost and the limit.
    let body = app.gql(&nested(3), json!({}), None).await;
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("2020200") && message.contains("10000"),
        "{message}"
    );
}

#[tokio::test]
async fn the_heaviest_legitimate_documents_pass_and_report_their_cost() {
    let (app, token) = seeded().await;
    let all = "id title link poster { name karma rank } postedAt votes score groups downvotes myVote slug views";
    let page = format!("{{ articles(pageSize: 100) {{ {all} }} }}");
    let top = format!(
        "{{ topPosters(limit: 100) {{ rank karma user {{ name karma rank articles {{ {all} }} }} }} }}"
    );
    let introspection = include_str!("introspection.graphql");
    for query in [page.as_str(), top.as_str(), introspection] {
        let data = app.gql_ok(query, json!({}), Some(&token)).await;
        assert!(data.is_object());
    }
    let response = app.gql_with_cost(&page, json!({})).await;
    assert_eq!(
        response["extensions"]["cost"]["requested"], 200,
        "{response}"
    );
    assert_eq!(response["extensions"]["cost"]["limit"], 10_000);
    assert_eq!(response["data"]["articles"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn undeclared_variables_are_refused_and_never_cached() {
    let (app, _) = seeded().await;
    let health = || async {
        app.health().await["responseCache"]["entries"]
            .as_u64()
            .unwrap()
    };
    let entries = health().await;
    for i in 0..20 {
        let body = app
            .gql(
                "{ articles { id } }",
                json!({ format!("junk{i}"): "x".repeat(10_000) }),
                None,
            )
            .await;
        assert_eq!(error_code(&body), "GRAPHQL_VALIDATION_FAILED", "{body}");
        assert!(body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("$junk{i}")));
    }
    assert_eq!(health().await, entries, "nothing was cached");
}

#[tokio::test]
async fn huge_group_lists_are_refused_and_write_nothing() {
    let app = spawn_app_with(|s| s.max_body_bytes = 8 * 1024 * 1024).await;
    let token = app.sign_up("alice").await;
    let article = app.post(&token, "mine", &[]).await;
    app.wait_for_derivations().await;
    let mut redis = app.redis.conn().await;
    let groups: Vec<String> = (0..150_000).map(|i| format!("g{i}")).collect();
    let before = commands_processed(&mut redis).await;
    let body = app
        .gql(
            "mutation($g: [String!]!) { post(title: \"t\", link: \"https://e.com\", groups: $g) { id } }",
            json!({ "g": groups }),
            Some(&token),
        )
        .await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
    assert_eq!(body["errors"][0]["extensions"]["field"], "groups");
    let body = app
        .gql(
            "mutation($id: ID!, $g: [String!]!) { setGroups(articleId: $id, add: $g) { id } }",
            json!({ "id": article["id"], "g": groups }),
            Some(&token),
        )
        .await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
    // Only the two session lookups (a script each: the session's GET and
    // its account's HMGET) reached Redis: nothing was written.
    let after = commands_processed(&mut redis).await;
    assert!(after - before <= 7, "{} commands", after - before);
    let ids: Option<String> = redis::cmd("GET")
        .arg("article:")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(ids.as_deref(), Some("1"), "no second article");
    let eleven: Vec<String> = (0..11).map(|i| format!("g{i}")).collect();
    let body = app
        .gql(
            "mutation($g: [String!]!) { post(title: \"t\", link: \"https://e.com\", groups: $g) { id } }",
            json!({ "g": eleven }),
            Some(&token),
        )
        .await;
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("at most 10 distinct groups"));
    // Duplicates are merged before the count: 20 copies are one group.
    let copies = vec!["same"; 20];
    let data = app
        .gql_ok(
            "mutation($g: [String!]!) { post(title: \"t\", link: \"https://e.com\", groups: $g) { groups } }",
            json!({ "g": copies }),
            Some(&token),
        )
        .await;
    assert_eq!(data["post"]["groups"], json!(["same"]));
    // The list itself is bounded before any name is read.
    let long = vec!["same"; 101];
    let body = app
        .gql(
            "mutation($g: [String!]!) { post(title: \"t\", link: \"https://e.com\", groups: $g) { id } }",
            json!({ "g": long }),
            Some(&token),
        )
        .await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("at most 100 names"));
}

/// Sends raw bytes and reads what comes back until the server closes or
/// `wait` passes.
async fn raw_exchange(address: &str, request: &[u8], wait: Duration) -> String {
    let mut stream = TcpStream::connect(address.trim_start_matches("http://"))
        .await
        .unwrap();
    stream.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn request_heads_over_64_kib_are_refused_with_431() {
    let app = spawn_app().await;
    let head = |size: usize| {
        format!(
            "GET /health HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
            "a".repeat(size)
        )
    };
    let reply = raw_exchange(
        &app.address,
        head(60_000).as_bytes(),
        Duration::from_secs(2),
    )
    .await;
    assert!(
        reply.starts_with("HTTP/1.1 200"),
        "{}",
        &reply[..reply.len().min(200)]
    );
    for size in [70_000, 100_000] {
        let reply = raw_exchange(&app.address, head(size).as_bytes(), Duration::from_secs(5)).await;
        assert!(reply.starts_with("HTTP/1.1 431"), "{size}: {reply}");
        let body: Value = serde_json::from_str(reply.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(error_code(&body), "HEADERS_TOO_LARGE", "{body}");
        assert!(reply.to_ascii_lowercase().contains("connection: close"));
    }
    // Far larger heads are cut by the HTTP parser before they are read.
    let reply = raw_exchange(
        &app.address,
        head(1_000_000).as_bytes(),
        Duration::from_secs(5),
    )
    .await;
    assert!(
        reply.starts_with("HTTP/1.1 431"),
        "{}",
        &reply[..reply.len().min(200)]
    );
    // The URL counts too.
    let long = format!(
        "GET /graphql?query={} HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(40_000),
        "b".repeat(30_000)
    );
    let reply = raw_exchange(&app.address, long.as_bytes(), Duration::from_secs(5)).await;
    assert!(
        reply.starts_with("HTTP/1.1 431"),
        "{}",
        &reply[..reply.len().min(200)]
    );
}

#[tokio::test]
async fn bodies_are_bounded_in_size_and_time() {
    let app = spawn_app_with(|s| s.body_timeout_ms = 300).await;
    // A 500 MB body is refused from its header, without being read.
    let reply = raw_exchange(
        &app.address,
        b"POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 524288000\r\n\r\n{\"query\":",
        Duration::from_secs(5),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.contains("\"PAYLOAD_TOO_LARGE\""), "{reply}");
    // A chunked body (no length announced) is cut at the limit.
    let mut request =
        b"POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    let chunk = "x".repeat(16 * 1024);
    for _ in 0..12 {
        request.extend_from_slice(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes());
    }
    let reply = raw_exchange(&app.address, &request, Duration::from_secs(5)).await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply:.300}");
    assert!(reply.contains("\"PAYLOAD_TOO_LARGE\""), "{reply:.300}");
    // A client that sends a whole 1 MB body reads its 413 (the server reads
    // and drops the rest instead of resetting the connection under it).
    let response = app
        .client
        .post(format!("{}/graphql", app.address))
        .json(&json!({ "query": "{ articleCount }", "variables": { "x": "y".repeat(1 << 20) } }))
        .send()
        .await
        .expect("an answer, not a reset");
    assert_eq!(response.status(), 413);
    assert_eq!(
        error_code(&response.json::<Value>().await.unwrap()),
        "PAYLOAD_TOO_LARGE"
    );
    // A body that trickles in is cut at the body timeout.
    let reply = raw_exchange(
        &app.address,
        b"POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"query\":",
        Duration::from_secs(5),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("\"REQUEST_TIMEOUT\""), "{reply}");
}

#[tokio::test]
async fn half_sent_headers_and_idle_connections_are_dropped_and_capped() {
    let app = spawn_app_with(|s| {
        s.header_timeout_ms = 300;
        s.max_connections = 20;
    })
    .await;
    let target = app.address.trim_start_matches("http://").to_owned();
    // Twenty clients that never finish their headers hold every slot…
    let mut holders = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(&target).await.unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        holders.push(s);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    // …so the next one is told the server is busy, in JSON.
    let reply = raw_exchange(
        &app.address,
        b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n",
        Duration::from_secs(2),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("SERVICE_UNAVAILABLE"), "{reply}");
    // The header timeout closes them all, and the server serves again.
    for mut s in holders {
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "a half-open connection was dropped");
    }
    eventually_every(
        "the server to serve again",
        Duration::from_millis(2_500),
        Duration::from_millis(50),
        async || {
            let health = app.client.get(format!("{}/health", app.address));
            health.send().await.is_ok_and(|r| r.status() == 200)
        },
    )
    .await;
}

#[tokio::test]
async fn errors_never_echo_a_huge_input() {
    let app = spawn_app().await;
    let field = "f".repeat(30_000);
    let body = app.gql(&format!("{{ {field} }}"), json!({}), None).await;
    assert_eq!(
        error_code(&body),
        "GRAPHQL_VALIDATION_FAILED",
        "{body:.300}"
    );
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(message.len() < 1024, "{} bytes", message.len());
    assert!(body.to_string().len() < 2048);
}

#[tokio::test]
async fn get_never_mutates_and_post_needs_json() {
    let (app, token) = seeded().await;
    let url = format!("{}/graphql", app.address);
    let response = app
        .client
        .get(&url)
        .query(&[(
            "query",
            "mutation { vote(articleId: \"1\", direction: DOWN) { votes } }",
        )])
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_code(&body), "METHOD_NOT_ALLOWED");
    let data = app
        .gql_ok(
            "{ article(id: \"1\") { votes downvotes } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(data["article"]["downvotes"], 0, "the GET voted nothing");

    // A form post (a cross-site "simple" request) is refused.
    let response = app
        .client
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("query=mutation%20%7B%20logOut%20%7D")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    assert_eq!(
        error_code(&response.json::<Value>().await.unwrap()),
        "UNSUPPORTED_MEDIA_TYPE"
    );
    for (body, says) in [
        ("{not json", "not valid JSON"),
        ("[{\"query\":\"{ articleCount }\"}]", "batched"),
        ("{\"variables\":{}}", "query"),
    ] {
        let response = app
            .client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
        assert_eq!(response.headers()["content-type"], "application/json");
        let reply: Value = response.json().await.unwrap();
        assert_eq!(error_code(&reply), "BAD_REQUEST");
        assert!(reply["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains(says));
    }
}

#[tokio::test]
async fn a_slow_or_paused_redis_fails_requests_in_bounded_time() {
    let app = spawn_app_with(|s| s.redis_timeout_ms = 300).await;
    app.gql_ok("{ articleCount }", json!({}), None).await;
    let mut admin = app.redis.conn().await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    pause_redis(&mut admin, 2_000).await;
    let body: Value = client
        .post(format!("{}/graphql", app.address))
        .json(&json!({ "query": "{ articles { id } }" }))
        .send()
        .await
        .expect("answers while Redis is paused")
        .json()
        .await
        .unwrap();
    assert_eq!(error_code(&body), "INTERNAL", "{body}");
    assert_eq!(body["errors"][0]["message"], "storage unavailable");
    let health = client
        .get(format!("{}/health", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 503);
    // The pause ends and the server serves again by itself.
    assert!(app.serves_again(60).await);
}

#[tokio::test]
async fn the_execution_deadline_answers_timeout() {
    let app = spawn_app_with(|s| {
        s.redis_timeout_ms = 5_000;
        s.request_timeout_ms = 200;
    })
    .await;
    let mut admin = app.redis.conn().await;
    pause_redis(&mut admin, 1_500).await;
    let body = app.gql("{ articles { id } }", json!({}), None).await;
    assert_eq!(error_code(&body), "TIMEOUT", "{body}");
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("200 ms"));
}

#[tokio::test]
async fn logs_carry_no_secrets_and_name_the_redis_cause() {
    let mut redis = TestRedis::start().await;
    let server = Binary::start(&redis.url(), &[]).await;
    let client = reqwest::Client::new();
    let secret = "hunter2-very-secret";
    let url = format!("{}/graphql", server.address);
    let sign_up =
        format!("mutation {{ signUp(name: \"alice\", password: \"{secret}\") {{ token }} }}");
    client
        .get(&url)
        .query(&[("query", &sign_up)])
        .send()
        .await
        .unwrap();
    client
        .post(&url)
        .json(&json!({ "query": "mutation($p: String!) { logIn(name: \"alice\", password: $p) { token } }", "variables": { "p": secret } }))
        .send()
        .await
        .unwrap();
    // Redis goes away: the log says why, and where, without the password.
    redis.stop();
    let body: Value = client
        .post(&url)
        .json(&json!({ "query": "{ articles { id } }" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(error_code(&body), "INTERNAL");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = server.log_text();
    assert!(log.contains("served"), "requests are logged: {log}");
    assert!(log.contains("/graphql"), "{log}");
    assert!(!log.contains(secret), "a password reached the log: {log}");
    assert!(!log.contains("hunter2"), "{log}");
    assert!(
        log.contains("No such file or directory") || log.contains("refused"),
        "the cause is named: {log}"
    );
    assert!(log.contains("redis.sock"), "the address is named: {log}");
}

#[tokio::test]
async fn distinct_queries_do_not_grow_the_server_without_bound() {
    let redis = TestRedis::start().await;
    let server = Binary::start(
        &redis.url(),
        &[("VOTEGRAPH_RESPONSE_CACHE_BYTES", "4194304")],
    )
    .await;
    let client = reqwest::Client::new();
    let url = format!("{}/graphql", server.address);
    let warm = server.rss_kib();
    // 8,000 distinct anonymous queries of 8 KB each: 64 MB of query text
    // that an unbounded document cache would keep, and three times that in
    // an unbounded response cache (its key, and the key in two indexes).
    // (A debug build serves them at a few hundred per second, so the test
    // sends 8,000 rather than the 20,000 the release build takes in seconds.)
    let padding = "x".repeat(8_000);
    let mut pending = futures_util::stream::FuturesUnordered::new();
    use futures_util::StreamExt;
    for i in 0..8_000 {
        let query = format!("{{ articles(pageSize: 1) {{ id }} }} # {i} {padding}");
        pending.push(client.post(&url).json(&json!({ "query": query })).send());
        if pending.len() >= 32 {
            let response = pending.next().await.unwrap().unwrap();
            assert_eq!(response.status(), 200);
        }
    }
    while let Some(response) = pending.next().await {
        assert_eq!(response.unwrap().status(), 200);
    }
    let health: Value = client
        .get(format!("{}/health", server.address))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let held = health["documentCache"]["textBytes"].as_u64().unwrap();
    assert!(held <= 2 * 1024 * 1024, "{health}");
    assert!(
        health["responseCache"]["bytes"].as_u64().unwrap() <= 4 * 1024 * 1024,
        "{health}"
    );
    let grown = server.rss_kib().saturating_sub(warm);
    assert!(
        grown < 64 * 1024,
        "RSS grew by {grown} KiB after 8,000 distinct queries"
    );
}

#[tokio::test]
async fn an_article_is_in_at_most_ten_groups() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    let first: Vec<String> = (0..8).map(|i| format!("g{i}")).collect();
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let article = app.post(&token, "grouped", &first).await;
    let set = |add: Vec<&'static str>, remove: Vec<&'static str>| {
        app.gql(
            "mutation($id: ID!, $a: [String!]!, $r: [String!]!) { setGroups(articleId: $id, add: $a, remove: $r) { groups } }",
            json!({ "id": article["id"], "a": add, "r": remove }),
            Some(&token),
        )
    };
    // 8 + 3 new would be 11: refused, and nothing changes.
    let body = set(vec!["x", "y", "z"], vec![]).await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
    assert!(body["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("at most 10 groups"));
    let data = app
        .gql_ok("{ article(id: \"1\") { groups } }", json!({}), None)
        .await;
    assert_eq!(data["article"]["groups"].as_array().unwrap().len(), 8);
    let mut redis = app.redis.conn().await;
    let x: bool = redis::cmd("EXISTS")
        .arg("group:x")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(!x, "nothing was written");
    // Removing one in the same call makes room; re-adding a member is free.
    let body = set(vec!["x", "y", "g0"], vec!["g1"]).await;
    assert_eq!(
        body["data"]["setGroups"]["groups"]
            .as_array()
            .unwrap()
            .len(),
        9,
        "{body}"
    );
}

#[tokio::test]
async fn work_stops_when_the_client_goes_away() {
    let redis = TestRedis::start().await;
    let server = Binary::start(&redis.url(), &[("VOTEGRAPH_REDIS_TIMEOUT_MS", "3000")]).await;
    let mut admin = redis.conn().await;
    pause_redis(&mut admin, 1_500).await;
    // The client gives up after 200 ms and closes its connection…
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let gave_up = impatient
        .post(format!("{}/graphql", server.address))
        .json(&json!({ "query": "{ articles { id } }" }))
        .send()
        .await;
    assert!(gave_up.is_err());
    // …and the server drops the request instead of finishing it: the
    // access log, written when a response is ready, never shows it.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let log = server.log_text();
    let served = log
        .lines()
        .filter(|l| l.contains("path=/graphql") && l.contains("served"))
        .count();
    assert_eq!(served, 0, "{log}");
    // A request that waits is served once Redis is back.
    let body: Value = reqwest::Client::new()
        .post(format!("{}/graphql", server.address))
        .json(&json!({ "query": "{ articleCount }" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["data"]["articleCount"], 0, "{body}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(server.log_text().contains("path=/graphql"));
}

#[tokio::test]
async fn aliased_mutations_count_one_by_one() {
    let app = spawn_app_with(|s| s.rate_sign_up = "5/3600".parse().unwrap()).await;
    let token = app.sign_up("alice").await;
    app.post(&token, "viewed", &[]).await;
    // 50 aliased views from one viewer are one view.
    let views: String = (0..50)
        .map(|i| format!("v{i}: viewArticle(id: \"1\") {{ views }} "))
        .collect();
    let body = app
        .gql(&format!("mutation {{ {views} }}"), json!({}), None)
        .await;
    assert!(body.get("errors").is_none(), "{body}");
    let data = app
        .gql_ok("{ article(id: \"1\") { views } }", json!({}), None)
        .await;
    assert_eq!(data["article"]["views"], 1);
    // 50 aliased sign-ups from one address: the 4 left of its 5 succeed.
    let sign_ups: String = (0..50)
        .map(|i| format!("s{i}: signUp(name: \"user{i}\", password: \"password{i}\") {{ token }} "))
        .collect();
    let body = app
        .gql(&format!("mutation {{ {sign_ups} }}"), json!({}), None)
        .await;
    let limited = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["extensions"]["code"] == "RATE_LIMITED")
        .count();
    assert_eq!(limited, 46, "{body:.500}");
    let mut redis = app.redis.conn().await;
    let users: Vec<String> = redis::cmd("KEYS")
        .arg("user:*")
        .query_async(&mut redis)
        .await
        .unwrap();
    let accounts = users.iter().filter(|k| k.matches(':').count() == 1).count();
    assert_eq!(accounts, 5, "{users:?}");
}

#[tokio::test]
async fn repeated_attacks_leave_memory_flat() {
    let redis = TestRedis::start().await;
    let server = Binary::start(&redis.url(), &[]).await;
    let client = reqwest::Client::new();
    let url = format!("{}/graphql", server.address);
    let send = |query: String| client.post(&url).json(&json!({ "query": query })).send();
    // Warm up, then measure.
    send(nested(4)).await.unwrap();
    let before = server.rss_kib();
    for _ in 0..30 {
        for query in [nested(4), fragment_bomb(20), fragment_bomb(40)] {
            let body: Value = send(query).await.unwrap().json().await.unwrap();
            assert_eq!(error_code(&body), "QUERY_TOO_COMPLEX");
        }
    }
    let grown = server.rss_kib().saturating_sub(before);
    assert!(grown < 16 * 1024, "RSS grew by {grown} KiB");
}

#[tokio::test]
async fn websocket_operations_pass_the_same_limits_and_deadline() {
    let app = spawn_app_with(|s| {
        s.redis_timeout_ms = 5_000;
        s.request_timeout_ms = 200;
    })
    .await;
    let mut ws = WsClient::connect(&app, TRANSPORT_WS).await;
    // An expensive subscription document is refused like an HTTP one.
    let bomb = fragment_bomb(20).replace(
        "{ articles(pageSize: 1) { ...B0 } }",
        "subscription { scoreChanged { article { ...B0 } } }",
    );
    ws.subscribe("bomb", &bomb, json!({})).await;
    let message = ws.next_raw().await;
    assert_eq!(message["id"], "bomb", "{message}");
    let errors = if message["type"] == "error" {
        message["payload"].clone()
    } else {
        message["payload"]["errors"].clone()
    };
    assert_eq!(
        errors[0]["extensions"]["code"], "QUERY_TOO_COMPLEX",
        "{message}"
    );
    // A query over the socket runs under the deadline.
    let mut admin = app.redis.conn().await;
    pause_redis(&mut admin, 1_500).await;
    ws.subscribe("slow", "{ articles { id } }", json!({})).await;
    let mut message = ws.next_raw().await;
    while message["id"] == "bomb" {
        assert_eq!(message["type"], "complete", "{message}");
        message = ws.next_raw().await;
    }
    assert_eq!(message["id"], "slow", "{message}");
    assert_eq!(
        message["payload"]["errors"][0]["extensions"]["code"], "TIMEOUT",
        "{message}"
    );
}

/// A connection from a given loopback source address (127.0.0.0/8 is all
/// local on Linux).
async fn connect_from(source: &str, address: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket
        .connect(address.trim_start_matches("http://").parse().unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn one_address_cannot_take_every_connection() {
    let app = spawn_app_with(|s| {
        s.max_connections = 100;
        s.max_connections_per_client = 5;
        s.header_timeout_ms = 5_000;
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..5 {
        let mut s = connect_from("127.0.0.2", &app.address).await;
        s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The sixth from the same address is refused…
    let mut sixth = connect_from("127.0.0.2", &app.address).await;
    sixth
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), sixth.read_to_end(&mut reply)).await;
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 429"), "{reply}");
    assert!(reply.contains("\"RATE_LIMITED\""), "{reply}");
    // …while another address is served.
    let mut other = connect_from("127.0.0.3", &app.address).await;
    other
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), other.read_to_end(&mut reply)).await;
    assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 200"));
    // Closing one frees its place.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut again = connect_from("127.0.0.2", &app.address).await;
    again
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), again.read_to_end(&mut reply)).await;
    assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 200"));
}
