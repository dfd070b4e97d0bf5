use redis::AsyncCommands;
use serde_json::json;
use votegraph::config::Settings;

use crate::helpers::{error_code, spawn_app, spawn_app_with, test_settings};

const ME: &str = "{ me { name } }";

#[tokio::test]
async fn sign_up_logs_in_and_me_returns_the_user() {
    let app = spawn_app().await;
    let data = app
        .gql_ok(
            "mutation { signUp(name: \"alice\", password: \"correct horse\") { token user { name } } }",
            json!({}),
            None,
        )
        .await;
    let token = data["signUp"]["token"].as_str().unwrap();
    assert_eq!(data["signUp"]["user"]["name"], "alice");
    assert!(token.len() >= 32, "token has at least 128 bits: {token}");

    assert_eq!(
        app.gql_ok(ME, json!({}), Some(token)).await["me"]["name"],
        "alice"
    );
    assert!(app.gql_ok(ME, json!({}), None).await["me"].is_null());
    assert!(app.gql_ok(ME, json!({}), Some("not-a-token")).await["me"].is_null());
}

#[tokio::test]
async fn passwords_and_tokens_are_stored_only_as_hashes() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    let mut redis = app.redis.conn().await;

    let stored: String = redis.hget("user:alice", "password").await.unwrap();
    assert!(stored.starts_with("$argon2id$"), "{stored}");
    assert!(!stored.contains("password-of-alice"));

    let keys: Vec<String> = redis.keys("session:*").await.unwrap();
    assert_eq!(keys.len(), 1);
    assert!(
        !keys[0].contains(&token),
        "the raw token must not be stored"
    );
    let ttl: i64 = redis.ttl(&keys[0]).await.unwrap();
    assert!(ttl > 29 * 86_400 && ttl <= 30 * 86_400, "ttl {ttl}");
}

#[tokio::test]
async fn a_taken_name_is_refused_without_touching_the_account() {
    let app = spawn_app().await;
    app.sign_up("alice").await;
    let body = app
        .gql(
            "mutation { signUp(name: \"alice\", password: \"another password\") { token } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT");
    assert_eq!(body["errors"][0]["extensions"]["field"], "name");
    // The original password still works.
    let login = app
        .gql(
            "mutation { logIn(name: \"alice\", password: \"password-of-alice\") { token } }",
            json!({}),
            None,
        )
        .await;
    assert!(login["data"]["logIn"]["token"].is_string(), "{login}");
}

#[tokio::test]
async fn log_in_checks_the_password() {
    let app = spawn_app().await;
    app.sign_up("alice").await;
    let login = "mutation($n: String!, $p: String!) { logIn(name: $n, password: $p) { token user { name } } }";

    let ok = app
        .gql_ok(
            login,
            json!({ "n": "alice", "p": "password-of-alice" }),
            None,
        )
        .await;
    let token = ok["logIn"]["token"].as_str().unwrap();
    assert_eq!(ok["logIn"]["user"]["name"], "alice");
    assert_eq!(
        app.gql_ok(ME, json!({}), Some(token)).await["me"]["name"],
        "alice"
    );

    for (name, password) in [
        ("alice", "wrong password"),
        ("nobody", "password-of-alice"),
        ("a", "x"),
    ] {
        let body = app
            .gql(login, json!({ "n": name, "p": password }), None)
            .await;
        assert_eq!(
            error_code(&body),
            "UNAUTHENTICATED",
            "{name}/{password}: {body}"
        );
        assert_eq!(body["errors"][0]["message"], "invalid name or password");
        assert!(body["data"].is_null());
    }
}

#[tokio::test]
async fn log_out_revokes_only_that_token() {
    let app = spawn_app().await;
    let first = app.sign_up("alice").await;
    let second = app
        .gql_ok(
            "mutation { logIn(name: \"alice\", password: \"password-of-alice\") { token } }",
            json!({}),
            None,
        )
        .await["logIn"]["token"]
        .as_str()
        .unwrap()
        .to_owned();

    let out = app
        .gql_ok("mutation { logOut }", json!({}), Some(&first))
        .await;
    assert_eq!(out["logOut"], true);
    assert!(app.gql_ok(ME, json!({}), Some(&first)).await["me"].is_null());
    assert_eq!(
        app.gql_ok(ME, json!({}), Some(&second)).await["me"]["name"],
        "alice"
    );

    // A revoked token cannot post, and logging out again revokes nothing.
    let body = app
        .gql(
            "mutation { post(title: \"t\", link: \"https://e.com\") { id } }",
            json!({}),
            Some(&first),
        )
        .await;
    assert_eq!(error_code(&body), "UNAUTHENTICATED");
    assert_eq!(
        app.gql_ok("mutation { logOut }", json!({}), Some(&first))
            .await["logOut"],
        false
    );
    assert_eq!(
        app.gql_ok("mutation { logOut }", json!({}), None).await["logOut"],
        false
    );
}

#[tokio::test]
async fn mutations_need_a_login_and_write_nothing_without_one() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    let id = app.post(&token, "existing", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut redis = app.redis.conn().await;
    let before: Vec<String> = redis.keys("*").await.unwrap();

    for (query, bad_token) in [
        (
            "mutation { post(title: \"t\", link: \"https://e.com\") { id } }".to_owned(),
            None,
        ),
        (
            format!("mutation {{ vote(articleId: \"{id}\") {{ id }} }}"),
            None,
        ),
        (
            format!("mutation {{ setGroups(articleId: \"{id}\", add: [\"x\"]) {{ id }} }}"),
            None,
        ),
        (
            format!("mutation {{ vote(articleId: \"{id}\") {{ id }} }}"),
            Some("expired-or-forged"),
        ),
    ] {
        let body = app.gql(&query, json!({}), bad_token).await;
        assert_eq!(error_code(&body), "UNAUTHENTICATED", "{query}: {body}");
        assert!(body["data"].is_null());
    }
    let mut after: Vec<String> = redis.keys("*").await.unwrap();
    let mut before = before;
    before.sort();
    after.sort();
    assert_eq!(before, after, "no key was created");
    let votes: i64 = redis.hget(format!("article:{id}"), "votes").await.unwrap();
    assert_eq!(votes, 1);
}

const LOG_IN: &str =
    "mutation($n: String!, $p: String!) { logIn(name: $n, password: $p) { token } }";

/// 3 logIn attempts per name per minute.
fn login_limit(settings: &mut Settings) {
    settings.login_attempts = 3;
    settings.login_window_secs = 60;
}

#[tokio::test]
async fn repeated_failed_logins_are_rate_limited_per_name() {
    let app = spawn_app_with(login_limit).await;
    app.sign_up("alice").await;
    app.sign_up("bob").await;
    let wrong = json!({ "n": "alice", "p": "wrong password" });
    for _ in 0..3 {
        let body = app.gql(LOG_IN, wrong.clone(), None).await;
        assert_eq!(error_code(&body), "UNAUTHENTICATED", "{body}");
    }

    // Now even the right password is refused, saying when to come back.
    let body = app
        .gql(
            LOG_IN,
            json!({ "n": "alice", "p": "password-of-alice" }),
            None,
        )
        .await;
    assert_eq!(error_code(&body), "RATE_LIMITED", "{body}");
    let retry = body["errors"][0]["extensions"]["retryAfter"]
        .as_u64()
        .unwrap();
    assert!((1..=60).contains(&retry), "{body}");
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains(&format!("{retry} seconds")), "{message}");
    assert!(body["data"].is_null(), "{body}");

    // Other names are not affected.
    app.gql_ok(LOG_IN, json!({ "n": "bob", "p": "password-of-bob" }), None)
        .await;

    // The window is a Redis TTL: when it ends, alice may log in again.
    let mut conn = app.redis.conn().await;
    let ttl: i64 = conn.ttl("user:alice:login-attempts").await.unwrap();
    assert!((1..=60).contains(&ttl), "ttl {ttl}");
    let _: () = conn.del("user:alice:login-attempts").await.unwrap();
    app.gql_ok(
        LOG_IN,
        json!({ "n": "alice", "p": "password-of-alice" }),
        None,
    )
    .await;
}

#[tokio::test]
async fn a_successful_login_resets_the_count() {
    let app = spawn_app_with(login_limit).await;
    app.sign_up("alice").await;
    let wrong = json!({ "n": "alice", "p": "wrong password" });
    let right = json!({ "n": "alice", "p": "password-of-alice" });
    for _ in 0..2 {
        app.gql(LOG_IN, wrong.clone(), None).await;
    }
    app.gql_ok(LOG_IN, right.clone(), None).await;
    let mut conn = app.redis.conn().await;
    let exists: bool = conn.exists("user:alice:login-attempts").await.unwrap();
    assert!(!exists, "the count is gone after a success");
    for _ in 0..2 {
        app.gql(LOG_IN, wrong.clone(), None).await;
    }
    app.gql_ok(LOG_IN, right, None).await;
}

#[tokio::test]
async fn concurrent_guesses_cannot_exceed_the_limit() {
    let app = spawn_app_with(login_limit).await;
    app.sign_up("alice").await;
    let guesses = (0..20).map(|i| {
        let app = &app;
        async move {
            app.gql(
                LOG_IN,
                json!({ "n": "alice", "p": format!("guess number {i}") }),
                None,
            )
            .await
        }
    });
    let bodies = futures_util::future::join_all(guesses).await;
    let checked = bodies
        .iter()
        .filter(|b| error_code(b) == "UNAUTHENTICATED")
        .count();
    let limited = bodies
        .iter()
        .filter(|b| error_code(b) == "RATE_LIMITED")
        .count();
    assert_eq!((checked, limited), (3, 17));
}

const SIGN_UP: &str =
    "mutation($n: String!, $p: String!) { signUp(name: $n, password: $p) { token user { name } } }";

#[tokio::test]
async fn a_name_is_one_name_whatever_its_case() {
    let app = spawn_app_with(login_limit).await;
    let data = app
        .gql_ok(
            SIGN_UP,
            json!({ "n": "CaseTwin", "p": "twin password" }),
            None,
        )
        .await;
    assert_eq!(data["signUp"]["user"]["name"], "CaseTwin");
    // Its case twin is taken, and nothing of it is written.
    for twin in ["casetwin", "CASETWIN", "cAsEtWiN"] {
        let body = app
            .gql(SIGN_UP, json!({ "n": twin, "p": "another password" }), None)
            .await;
        assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
        assert!(
            body["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("taken"),
            "{body}"
        );
        let mut conn = app.redis.conn().await;
        let exists: bool = conn.exists(format!("user:{twin}")).await.unwrap();
        assert!(!exists, "{twin} was not created");
    }
    // Any case of the name logs into the one account.
    for typed in ["CaseTwin", "casetwin", "CASETWIN"] {
        let data = app
            .gql_ok(LOG_IN, json!({ "n": typed, "p": "twin password" }), None)
            .await;
        let token = data["logIn"]["token"].as_str().unwrap();
        let me = app.gql_ok(ME, json!({}), Some(token)).await;
        assert_eq!(me["me"]["name"], "CaseTwin", "logged in as {typed}");
    }
    // Guesses in other cases count against the one name: 3 per window.
    for typed in ["casetwin", "CASETWIN", "CaseTwin"] {
        let body = app
            .gql(LOG_IN, json!({ "n": typed, "p": "wrong password" }), None)
            .await;
        assert_eq!(error_code(&body), "UNAUTHENTICATED", "{body}");
    }
    let body = app
        .gql(
            LOG_IN,
            json!({ "n": "caseTWIN", "p": "twin password" }),
            None,
        )
        .await;
    assert_eq!(error_code(&body), "RATE_LIMITED", "{body}");
}

#[tokio::test]
async fn case_twins_made_before_names_were_folded_keep_their_accounts() {
    let app = spawn_app().await;
    app.gql_ok(SIGN_UP, json!({ "n": "Twin", "p": "first password" }), None)
        .await;
    // An older version let a case twin in: make one by hand, later, and
    // take away the folded-name index as that version had none.
    let mut conn = app.redis.conn().await;
    let (hash, created): (String, i64) = redis::cmd("HMGET")
        .arg("user:Twin")
        .arg("password")
        .arg("created")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = conn
        .hset_multiple(
            "user:twin",
            &[
                ("name", "twin".to_owned()),
                ("password", hash),
                ("created", (created + 10).to_string()),
            ],
        )
        .await
        .unwrap();
    let _: () = conn
        .del(&["users:by-folded-name", "index:user-names:built"])
        .await
        .unwrap();
    // A sign-up finds the index gone and builds it first: the twins are
    // indexed, the older keeps the folded name, and no third twin is made.
    let body = app
        .gql(SIGN_UP, json!({ "n": "TWIN", "p": "third password" }), None)
        .await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
    let indexed: String = conn.hget("users:by-folded-name", "twin").await.unwrap();
    assert_eq!(indexed, "Twin");
    let _: () = conn
        .del(&["users:by-folded-name", "index:user-names:built"])
        .await
        .unwrap();
    // A new instance indexes the accounts on its first start.
    let other = crate::helpers::spawn_server(test_settings(&app.redis)).await;
    let log_in = |name: &'static str| {
        let client = app.client.clone();
        let address = other.address.clone();
        async move {
            let body = crate::helpers::gql_at(
                &client,
                &address,
                LOG_IN,
                json!({ "n": name, "p": "first password" }),
                None,
                None,
            )
            .await;
            let token = body["data"]["logIn"]["token"].as_str().unwrap().to_owned();
            let me =
                crate::helpers::gql_at(&client, &address, ME, json!({}), Some(&token), None).await;
            me["data"]["me"]["name"].as_str().unwrap().to_owned()
        }
    };
    // Each twin logs in with its exact name; other cases reach the older.
    assert_eq!(log_in("Twin").await, "Twin");
    assert_eq!(log_in("twin").await, "twin");
    assert_eq!(log_in("TWIN").await, "Twin");
    // No third twin.
    let body = crate::helpers::gql_at(
        &app.client,
        &other.address,
        SIGN_UP,
        json!({ "n": "tWiN", "p": "third password" }),
        None,
        None,
    )
    .await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
    let indexed: String = conn.hget("users:by-folded-name", "twin").await.unwrap();
    assert_eq!(indexed, "Twin");
}
