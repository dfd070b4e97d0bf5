//! Rate limits on every write: counted in Redis (so every instance shares
//! them), refused with RATE_LIMITED and `retryAfter`, writing nothing.

use std::collections::HashSet;

use redis::AsyncCommands;
use serde_json::{json, Value};

use crate::helpers::{
    error_code, gql_at, spawn_app_with, spawn_server, test_settings, WsClient, TRANSPORT_WS,
};

/// Checks that `body` is one refusal by a rate limit whose message starts
/// with `too_many` and whose window is at most `window` seconds; returns
/// its `retryAfter`.
fn assert_limited(body: &Value, too_many: &str, window: u64) -> u64 {
    assert_eq!(error_code(body), "RATE_LIMITED", "{body}");
    let error = &body["errors"][0];
    let retry = error["extensions"]["retryAfter"]
        .as_u64()
        .unwrap_or_else(|| panic!("retryAfter in {body}"));
    assert!((1..=window).contains(&retry), "{body}");
    let message = error["message"].as_str().unwrap();
    assert_eq!(
        message,
        format!("{too_many}; try again in {retry} seconds"),
        "{body}"
    );
    assert!(body["data"].is_null(), "{body}");
    retry
}

const VOTE: &str = "mutation($id: ID!, $d: VoteDirection!) { vote(articleId: $id, direction: $d) { votes downvotes } }";
const SIGN_UP: &str =
    "mutation($n: String!, $p: String!) { signUp(name: $n, password: $p) { token } }";
const LOG_IN: &str =
    "mutation($n: String!, $p: String!) { logIn(name: $n, password: $p) { token } }";
const VIEW: &str = "mutation($id: ID!) { viewArticle(id: $id) { views } }";

fn sign_up_vars(name: &str) -> Value {
    json!({ "n": name, "p": format!("password-of-{name}") })
}

#[tokio::test]
async fn votes_over_the_limit_are_refused_and_change_nothing() {
    let app = spawn_app_with(|s| s.rate_vote = "2/60".parse().unwrap()).await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "voted on", &[]).await;
    let vote = |token: &str, d: &str| {
        let token = token.to_owned();
        let d = d.to_owned();
        let app = &app;
        async move {
            app.gql(VOTE, json!({ "id": "1", "d": d }), Some(&token))
                .await
        }
    };
    assert_eq!(vote(&bob, "UP").await["data"]["vote"]["votes"], 2);
    let down = vote(&bob, "DOWN").await;
    assert_eq!(down["data"]["vote"], json!({ "votes": 1, "downvotes": 1 }));

    let mut redis = app.redis.conn().await;
    let score_before: f64 = redis.zscore("score:", "article:1").await.unwrap();
    assert_limited(&vote(&bob, "UP").await, "too many votes", 60);
    let counts: (i64, i64) = redis::cmd("HMGET")
        .arg("article:1")
        .arg(&["votes", "downvotes"])
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(counts, (1, 1), "the refused vote changed nothing");
    assert!(redis
        .sismember::<_, _, bool>("downvoted:1", "user:bob")
        .await
        .unwrap());
    let score_after: f64 = redis.zscore("score:", "article:1").await.unwrap();
    assert_eq!(score_before, score_after);
    let ttl: i64 = redis.ttl("user:bob:rate:vote").await.unwrap();
    assert!((1..=60).contains(&ttl), "ttl {ttl}");

    // The limit is bob's: alice still votes.
    let alice_vote = vote(&alice, "DOWN").await;
    assert_eq!(
        alice_vote["data"]["vote"],
        json!({ "votes": 0, "downvotes": 2 })
    );
    // When bob's window ends, so does the refusal.
    let _: () = redis.del("user:bob:rate:vote").await.unwrap();
    assert_eq!(
        vote(&bob, "NONE").await["data"]["vote"],
        json!({ "votes": 0, "downvotes": 1 })
    );
}

#[tokio::test]
async fn posts_over_the_limit_are_refused_and_write_nothing() {
    let app = spawn_app_with(|s| s.rate_post = "2/3600".parse().unwrap()).await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "one", &["g"]).await;
    app.post(&alice, "two", &["g"]).await;
    let mut redis = app.redis.conn().await;
    let mut before: Vec<String> = redis.keys("*").await.unwrap();

    let body = app
        .gql(
            "mutation { post(title: \"three\", link: \"https://e.com/3\", groups: [\"g\", \"h\"]) { id } }",
            json!({}),
            Some(&alice),
        )
        .await;
    assert_limited(&body, "too many posts", 3600);
    let mut after: Vec<String> = redis.keys("*").await.unwrap();
    before.sort();
    after.sort();
    assert_eq!(before, after, "no key was created");
    let last_id: u64 = redis.get("article:").await.unwrap();
    assert_eq!(last_id, 2, "no id was handed out");
    assert_eq!(redis.zcard::<_, u64>("time:").await.unwrap(), 2);
    assert_eq!(redis.scard::<_, u64>("group:g").await.unwrap(), 2);
    assert_eq!(redis.hlen::<_, u64>("slug.to.id").await.unwrap(), 2);

    // Another user has a budget of their own.
    let bob = app.sign_up("bob").await;
    assert_eq!(app.post(&bob, "three", &[]).await["id"], "3");
}

#[tokio::test]
async fn group_changes_and_slug_renames_are_limited_per_user() {
    let app = spawn_app_with(|s| {
        s.rate_set_groups = "1/60".parse().unwrap();
        s.rate_rename_slug = "1/3600".parse().unwrap();
    })
    .await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    app.post(&alice, "grouped", &[]).await;
    let set_groups = "mutation($g: String!) { setGroups(articleId: \"1\", add: [$g]) { groups } }";
    let rename = "mutation($s: String!) { renameSlug(articleId: \"1\", slug: $s) { slug } }";

    let first = app
        .gql_ok(set_groups, json!({ "g": "x" }), Some(&alice))
        .await;
    assert_eq!(first["setGroups"]["groups"], json!(["x"]));
    let body = app.gql(set_groups, json!({ "g": "y" }), Some(&alice)).await;
    assert_limited(&body, "too many group changes", 60);

    let first = app
        .gql_ok(rename, json!({ "s": "one" }), Some(&alice))
        .await;
    assert_eq!(first["renameSlug"]["slug"], "one");
    let body = app.gql(rename, json!({ "s": "two" }), Some(&alice)).await;
    assert_limited(&body, "too many slug renames", 3600);

    let mut redis = app.redis.conn().await;
    let groups: HashSet<String> = redis.smembers("article:1:groups").await.unwrap();
    assert_eq!(groups, HashSet::from(["x".to_owned()]));
    assert!(!redis.exists::<_, bool>("group:y").await.unwrap());
    let slug: String = redis.hget("article:1", "slug").await.unwrap();
    assert_eq!(slug, "one");
    assert!(!redis
        .hexists::<_, _, bool>("slug.to.id", "two")
        .await
        .unwrap());

    // Bob's budget is untouched: his calls reach the poster check.
    let body = app.gql(set_groups, json!({ "g": "y" }), Some(&bob)).await;
    assert_eq!(error_code(&body), "FORBIDDEN", "{body}");
    let body = app.gql(rename, json!({ "s": "two" }), Some(&bob)).await;
    assert_eq!(error_code(&body), "FORBIDDEN", "{body}");
}

#[tokio::test]
async fn sign_ups_are_limited_per_address_even_when_concurrent() {
    let app = spawn_app_with(|s| s.rate_sign_up = "3/3600".parse().unwrap()).await;
    let bodies = futures_util::future::join_all((0..8).map(|i| {
        let app = &app;
        async move {
            app.gql(SIGN_UP, sign_up_vars(&format!("user{i}")), None)
                .await
        }
    }))
    .await;
    let created: Vec<usize> = (0..8)
        .filter(|&i| bodies[i]["data"]["signUp"]["token"].is_string())
        .collect();
    assert_eq!(created.len(), 3, "{bodies:?}");
    for (i, body) in bodies.iter().enumerate() {
        if !created.contains(&i) {
            assert_limited(body, "too many sign-ups from this address", 3600);
        }
    }
    let mut redis = app.redis.conn().await;
    let mut users: Vec<String> = redis.keys("user:*").await.unwrap();
    // Accounts only, not their `user:<name>:<attr>` keys.
    users.retain(|key| key.matches(':').count() == 1);
    users.sort();
    let mut expected: Vec<String> = created.iter().map(|i| format!("user:user{i}")).collect();
    expected.sort();
    assert_eq!(users, expected, "no account for a refused sign-up");
    let sessions: Vec<String> = redis.keys("session:*").await.unwrap();
    assert_eq!(sessions.len(), 3);
    let count: u64 = redis.get("client:127.0.0.1:rate:sign-up").await.unwrap();
    assert!(count >= 3, "{count}");
}

#[tokio::test]
async fn log_ins_are_limited_per_address_as_well_as_per_name() {
    let app = spawn_app_with(|s| s.rate_log_in = "3/60".parse().unwrap()).await;
    app.sign_up("alice").await;
    app.sign_up("bob").await;
    let wrong = |name: &str| json!({ "n": name, "p": "wrong password" });
    for name in ["alice", "bob", "alice"] {
        let body = app.gql(LOG_IN, wrong(name), None).await;
        assert_eq!(error_code(&body), "UNAUTHENTICATED", "{body}");
    }
    // Bob has used one of his ten attempts, but the address has none left.
    let body = app.gql(LOG_IN, sign_up_vars("bob"), None).await;
    assert_limited(&body, "too many login attempts from this address", 60);
    let mut redis = app.redis.conn().await;
    let bob_attempts: u64 = redis.get("user:bob:login-attempts").await.unwrap();
    assert_eq!(
        bob_attempts, 1,
        "a refused attempt is not counted for the name"
    );
    let alice_attempts: u64 = redis.get("user:alice:login-attempts").await.unwrap();
    assert_eq!(alice_attempts, 2);
}

#[tokio::test]
async fn fifty_aliased_log_ins_in_one_document_are_fifty_attempts() {
    let app = spawn_app_with(|s| {
        s.rate_log_in = "30/60".parse().unwrap();
        s.login_attempts = 1000;
    })
    .await;
    app.sign_up("alice").await;
    let fields: String = (0..50)
        .map(|i| {
            format!("a{i}: logIn(name: \"alice\", password: \"guess number {i}\") {{ token }} ")
        })
        .collect();
    let body = app
        .gql(&format!("mutation {{ {fields}}}"), json!({}), None)
        .await;
    let errors = body["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 50, "{body}");
    let codes: Vec<&str> = errors
        .iter()
        .map(|e| e["extensions"]["code"].as_str().unwrap())
        .collect();
    assert!(
        codes[..30].iter().all(|&c| c == "UNAUTHENTICATED"),
        "{codes:?}"
    );
    assert!(
        codes[30..].iter().all(|&c| c == "RATE_LIMITED"),
        "{codes:?}"
    );
    assert_eq!(errors[30]["path"], json!(["a30"]));
    let mut redis = app.redis.conn().await;
    let counted: u64 = redis.get("client:127.0.0.1:rate:log-in").await.unwrap();
    assert_eq!(counted, 50);
    let by_name: u64 = redis.get("user:alice:login-attempts").await.unwrap();
    assert_eq!(by_name, 30, "the refused twenty never reached a password");
}

#[tokio::test]
async fn limits_are_shared_by_every_instance_on_one_redis() {
    let app = spawn_app_with(|s| {
        s.rate_vote = "3/60".parse().unwrap();
        s.rate_sign_up = "3/3600".parse().unwrap();
    })
    .await;
    let mut settings = test_settings(&app.redis);
    settings.rate_vote = "3/60".parse().unwrap();
    settings.rate_sign_up = "3/3600".parse().unwrap();
    let other = spawn_server(settings).await;
    let servers = [app.address.as_str(), other.address.as_str()];

    // Sign-ups from 127.0.0.1, alternating servers: three in all.
    let mut tokens = Vec::new();
    for (i, name) in ["alice", "bob", "carol"].into_iter().enumerate() {
        let body = gql_at(
            &app.client,
            servers[i % 2],
            SIGN_UP,
            sign_up_vars(name),
            None,
            None,
        )
        .await;
        tokens.push(
            body["data"]["signUp"]["token"]
                .as_str()
                .expect("token")
                .to_owned(),
        );
    }
    let body = gql_at(
        &app.client,
        servers[1],
        SIGN_UP,
        sign_up_vars("dave"),
        None,
        None,
    )
    .await;
    assert_limited(&body, "too many sign-ups from this address", 3600);

    app.post(&tokens[0], "shared", &[]).await;
    for (i, d) in ["UP", "NONE", "DOWN"].into_iter().enumerate() {
        let body = gql_at(
            &app.client,
            servers[i % 2],
            VOTE,
            json!({ "id": "1", "d": d }),
            Some(&tokens[1]),
            None,
        )
        .await;
        assert!(body.get("errors").is_none(), "{body}");
    }
    for server in servers {
        let body = gql_at(
            &app.client,
            server,
            VOTE,
            json!({ "id": "1", "d": "UP" }),
            Some(&tokens[1]),
            None,
        )
        .await;
        assert_limited(&body, "too many votes", 60);
    }
    let mut redis = app.redis.conn().await;
    let downvotes: i64 = redis.hget("article:1", "downvotes").await.unwrap();
    assert_eq!(downvotes, 1, "bob's last counted vote stands");
}

#[tokio::test]
async fn forwarded_addresses_count_only_from_a_trusted_proxy() {
    // Untrusted (the default): the header is ignored, 127.0.0.1 is counted.
    let app = spawn_app_with(|s| s.rate_sign_up = "1/3600".parse().unwrap()).await;
    let first = app
        .gql_forwarded("198.51.100.1", SIGN_UP, sign_up_vars("alice"), None)
        .await;
    assert!(first["data"]["signUp"]["token"].is_string(), "{first}");
    let second = app
        .gql_forwarded("198.51.100.2", SIGN_UP, sign_up_vars("bob"), None)
        .await;
    assert_limited(&second, "too many sign-ups from this address", 3600);
    let mut redis = app.redis.conn().await;
    let keys: Vec<String> = redis.keys("client:*").await.unwrap();
    assert_eq!(keys, vec!["client:127.0.0.1:rate:sign-up".to_owned()]);

    // 127.0.0.1 trusted: each forwarded address has its own budget.
    let app = spawn_app_with(|s| {
        s.rate_sign_up = "1/3600".parse().unwrap();
        s.trusted_proxies = "127.0.0.1".parse().unwrap();
    })
    .await;
    for (addr, name) in [("198.51.100.1", "alice"), ("198.51.100.2", "bob")] {
        let body = app
            .gql_forwarded(addr, SIGN_UP, sign_up_vars(name), None)
            .await;
        assert!(body["data"]["signUp"]["token"].is_string(), "{body}");
    }
    // A client cannot prepend its way to a new budget: the right-most
    // untrusted entry is the one counted.
    let body = app
        .gql_forwarded(
            "203.0.113.77, 198.51.100.1",
            SIGN_UP,
            sign_up_vars("carol"),
            None,
        )
        .await;
    assert_limited(&body, "too many sign-ups from this address", 3600);
    // Without the header the proxy itself is the client, with its own budget.
    let body = app.gql(SIGN_UP, sign_up_vars("dave"), None).await;
    assert!(body["data"]["signUp"]["token"].is_string(), "{body}");
    let mut redis = app.redis.conn().await;
    let mut keys: Vec<String> = redis.keys("client:*").await.unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "client:127.0.0.1:rate:sign-up",
            "client:198.51.100.1:rate:sign-up",
            "client:198.51.100.2:rate:sign-up",
        ]
    );
}

#[tokio::test]
async fn views_count_once_per_viewer_per_window() {
    let app = spawn_app_with(|s| s.trusted_proxies = "127.0.0.1".parse().unwrap()).await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "popular", &[]).await;
    let view = |from: &'static str, token: Option<String>| {
        let app = &app;
        async move {
            let body = app
                .gql_forwarded(from, VIEW, json!({ "id": "1" }), token.as_deref())
                .await;
            assert!(body.get("errors").is_none(), "{body}");
            body["data"]["viewArticle"]["views"].as_i64().unwrap()
        }
    };
    let (a, b) = ("198.51.100.1", "198.51.100.2");
    assert_eq!(view(a, None).await, 1);
    assert_eq!(view(a, None).await, 1, "a repeat is not counted");
    assert_eq!(view(b, None).await, 2);
    assert_eq!(
        view(a, Some(alice.clone())).await,
        3,
        "alice is her own viewer"
    );
    assert_eq!(view(b, Some(alice.clone())).await, 3, "wherever she is");

    let mut redis = app.redis.conn().await;
    let viewers: HashSet<String> = redis.smembers("article:1:viewers").await.unwrap();
    let expected: HashSet<String> = ["client:198.51.100.1", "client:198.51.100.2", "user:alice"]
        .map(str::to_owned)
        .into();
    assert_eq!(viewers, expected);
    let ttl: i64 = redis.ttl("article:1:viewers").await.unwrap();
    assert!((3500..=3600).contains(&ttl), "ttl {ttl}");

    // When the window ends the same viewer counts again.
    let _: () = redis.del("article:1:viewers").await.unwrap();
    assert_eq!(view(a, None).await, 4);

    let body = app
        .gql_forwarded(a, VIEW, json!({ "id": "99" }), None)
        .await;
    assert_eq!(error_code(&body), "NOT_FOUND", "{body}");
    assert!(!redis.exists::<_, bool>("article:99:viewers").await.unwrap());
}

#[tokio::test]
async fn counted_views_are_limited_per_address_or_per_user() {
    let app = spawn_app_with(|s| s.rate_view = "2/60".parse().unwrap()).await;
    let alice = app.sign_up("alice").await;
    for title in ["one", "two", "three"] {
        app.post(&alice, title, &[]).await;
    }
    let view = |id: &str, token: Option<&str>| {
        let (app, id, token) = (&app, id.to_owned(), token.map(str::to_owned));
        async move { app.gql(VIEW, json!({ "id": id }), token.as_deref()).await }
    };
    assert_eq!(view("1", None).await["data"]["viewArticle"]["views"], 1);
    assert_eq!(view("2", None).await["data"]["viewArticle"]["views"], 1);
    assert_limited(
        &view("3", None).await,
        "too many views from this address",
        60,
    );

    let mut redis = app.redis.conn().await;
    let views: Option<i64> = redis.hget("article:3", "views").await.unwrap();
    assert_eq!(views, None, "the refused view was not counted");
    assert!(!redis.exists::<_, bool>("article:3:viewers").await.unwrap());

    // A repeat needs no budget: it is answered, not counted.
    assert_eq!(view("1", None).await["data"]["viewArticle"]["views"], 1);
    // A logged-in viewer is counted as the user, with the user's budget.
    assert_eq!(
        view("3", Some(&alice)).await["data"]["viewArticle"]["views"],
        1
    );
    assert_eq!(
        view("1", Some(&alice)).await["data"]["viewArticle"]["views"],
        2
    );
    assert_limited(&view("2", Some(&alice)).await, "too many views", 60);
}

#[tokio::test]
async fn writes_over_a_websocket_count_against_the_upgrade_address() {
    let app = spawn_app_with(|s| s.rate_view = "2/60".parse().unwrap()).await;
    let alice = app.sign_up("alice").await;
    for title in ["one", "two", "three"] {
        app.post(&alice, title, &[]).await;
    }
    let mut ws = WsClient::connect(&app, TRANSPORT_WS).await;
    ws.subscribe("1", VIEW, json!({ "id": "1" })).await;
    assert_eq!(ws.next_event().await["viewArticle"]["views"], 1);
    // Shared with plain HTTP from the same address.
    let body = app.gql(VIEW, json!({ "id": "2" }), None).await;
    assert_eq!(body["data"]["viewArticle"]["views"], 1, "{body}");
    ws.subscribe("2", VIEW, json!({ "id": "3" })).await;
    let mut refused = ws.next_raw().await;
    while refused["id"] != "2" || refused["type"] == "complete" {
        refused = ws.next_raw().await;
    }
    assert_limited(&refused["payload"], "too many views from this address", 60);
    ws.close().await;
    let mut redis = app.redis.conn().await;
    let counted: u64 = redis.get("client:127.0.0.1:rate:view").await.unwrap();
    assert_eq!(counted, 3);
}
