//! Roles and bans: the first admin made with `votegraph set-role`, who may
//! do what (and what `FORBIDDEN` says), and bans that end every session on
//! every instance and answer `BANNED` with the ban's end.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{
    error_code, eventually, set_role_cli, spawn_app, spawn_server, test_settings, Moderated, Seen,
    WsClient, TRANSPORT_WS,
};

const WITHIN: Duration = Duration::from_secs(1);

const ME: &str = "{ me { name role } }";

#[tokio::test]
async fn the_command_line_makes_the_first_admin_seen_by_every_instance() {
    let app = spawn_app().await;
    let other = spawn_server(test_settings(&app.redis)).await;
    let alice = app.sign_up("alice").await;
    app.sign_up("bob").await;
    let url = app.redis.url();

    for (name, role, said) in [
        ("nobody", "admin", "no user named \"nobody\""),
        ("alice", "owner", "unknown role \"owner\""),
    ] {
        let out = set_role_cli(&url, name, role);
        assert!(!out.status.success(), "{name} {role}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(said), "{stderr}");
    }
    let out = set_role_cli(&url, "ALICE", "admin");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "alice is now admin"
    );

    let me = |address: String| {
        let (client, token) = (app.client.clone(), alice.clone());
        async move { crate::helpers::gql_at(&client, &address, ME, json!({}), Some(&token), None).await }
    };
    eventually("the role on the other instance", WITHIN, async || {
        let body = me(other.address.clone()).await;
        if body["data"]["me"]["role"] == "ADMIN" {
            Ok(())
        } else {
            Err(body)
        }
    })
    .await;
    // Her token acts as an admin at once.
    let set = "mutation { setRole(name: \"bob\", role: MODERATOR) { name role } }";
    let data = app.gql_ok(set, json!({}), Some(&alice)).await;
    assert_eq!(
        data["setRole"],
        json!({ "name": "bob", "role": "MODERATOR" })
    );

    // Again: nothing to do, nothing logged.
    let out = set_role_cli(&url, "alice", "admin");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "alice was already admin"
    );
    let log = "{ modLog { totalCount edges { node { action user { name } moderator { name } reason } } } }";
    let data = app.gql_ok(log, json!({}), Some(&alice)).await;
    assert_eq!(data["modLog"]["totalCount"], 2, "{data}");
    let entries = &data["modLog"]["edges"];
    assert_eq!(entries[0]["node"]["user"]["name"], "bob");
    assert_eq!(entries[0]["node"]["moderator"]["name"], "alice");
    assert_eq!(entries[1]["node"]["user"]["name"], "alice");
    assert!(
        entries[1]["node"]["moderator"].is_null(),
        "the command line"
    );
}

/// An error's code and message.
fn refusal(body: &Value) -> (&str, &str) {
    let message = body["errors"][0]["message"].as_str().unwrap_or_default();
    (error_code(body), message)
}

#[tokio::test]
async fn roles_decide_who_may_act_and_refusals_name_the_role_needed() {
    let m = Moderated::start().await;
    m.app.sign_up("mod2").await;
    let set = "mutation($n: String!, $r: Role!) { setRole(name: $n, role: $r) { role } }";
    m.app
        .gql_ok(
            set,
            json!({ "n": "mod2", "r": "MODERATOR" }),
            Some(&m.admin),
        )
        .await;
    let article = m.app.post(&m.alice, "a story", &[]).await;
    let id = article["id"].as_str().unwrap();
    let entries = m.log(Some(&m.admin)).await.len();

    let remove = "mutation($id: ID!) { removeArticle(articleId: $id, reason: \"no\") { id } }";
    let body = m.app.gql(remove, json!({ "id": id }), Some(&m.alice)).await;
    assert_eq!(
        refusal(&body),
        ("FORBIDDEN", "this needs the MODERATOR or ADMIN role")
    );
    let body = m
        .app
        .gql(
            "{ moderationQueue { totalCount } }",
            json!({}),
            Some(&m.alice),
        )
        .await;
    assert_eq!(refusal(&body).0, "FORBIDDEN");
    let body = m
        .app
        .gql(
            set,
            json!({ "n": "alice", "r": "ADMIN" }),
            Some(&m.moderator),
        )
        .await;
    assert_eq!(refusal(&body), ("FORBIDDEN", "this needs the ADMIN role"));
    let ban = "mutation($n: String!) { banUser(name: $n, reason: \"r\") { name } }";
    for name in ["mod2", "root"] {
        let body = m
            .app
            .gql(ban, json!({ "n": name }), Some(&m.moderator))
            .await;
        let (code, message) = refusal(&body);
        assert_eq!(code, "FORBIDDEN", "{body}");
        assert!(message.contains("admin"), "{message}");
    }
    let body = m
        .app
        .gql(ban, json!({ "n": "mod" }), Some(&m.moderator))
        .await;
    assert_eq!(refusal(&body), ("FORBIDDEN", "no one can ban themselves"));
    let body = m
        .app
        .gql(set, json!({ "n": "root", "r": "MEMBER" }), Some(&m.admin))
        .await;
    assert!(refusal(&body).1.contains("last admin"), "{body}");
    let body = m
        .app
        .gql(ban, json!({ "n": "nobody" }), Some(&m.moderator))
        .await;
    assert_eq!(refusal(&body).0, "NOT_FOUND");
    assert_eq!(
        m.log(Some(&m.admin)).await.len(),
        entries,
        "refusals log nothing"
    );

    // Roles are public, and so are bans, as the moderation log is.
    m.app
        .gql_ok(ban, json!({ "n": "alice" }), Some(&m.moderator))
        .await;
    let users = "{ topPosters { user { name role banned bannedUntil } } }";
    let alice = json!({ "name": "alice", "role": "MEMBER", "banned": true, "bannedUntil": null });
    for reader in [None, Some(m.moderator.as_str())] {
        let seen = m.app.gql_ok(users, json!({}), reader).await;
        assert_eq!(seen["topPosters"][0]["user"], alice);
    }
}

/// A socket on `address` logged in as `token`.
async fn socket(address: &str, token: &str) -> WsClient {
    let auth = json!({ "Authorization": format!("Bearer {token}") });
    WsClient::connect_to(address, TRANSPORT_WS, auth).await
}

const LOG_IN: &str =
    "mutation($n: String!, $p: String!) { logIn(name: $n, password: $p) { token } }";

async fn log_in(m: &Moderated, name: &str) -> Value {
    let vars = json!({ "n": name, "p": format!("password-of-{name}") });
    m.app.gql(LOG_IN, vars, None).await
}

#[tokio::test]
async fn a_ban_ends_every_session_and_answers_banned_until_it_ends() {
    let m = Moderated::start().await;
    let bob = m.app.sign_up("bob").await;
    let article = m.app.post(&m.alice, "a story", &[]).await;
    let mut live = socket(&m.other.address, &bob).await;

    let until = chrono::DateTime::from_timestamp(chrono::Utc::now().timestamp() + 7200, 0);
    let until = until
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let ban = "mutation($n: String!, $u: DateTime) { banUser(name: $n, reason: \"spam\", until: $u) { banned bannedUntil } }";
    let data = m
        .app
        .gql_ok(ban, json!({ "n": "bob", "u": until }), Some(&m.moderator))
        .await;
    assert_eq!(
        data["banUser"],
        json!({ "banned": true, "bannedUntil": until })
    );

    match live.next().await {
        Seen::Closed(code, _) => assert_eq!(code, 4403),
        other => panic!("expected the socket closed, saw {other:?}"),
    }
    let me = m.at_other(ME, json!({}), Some(&bob)).await;
    assert!(me["data"]["me"].is_null(), "{me}");
    let vote = m
        .at_other(
            "mutation($id: ID!) { vote(articleId: $id) { id } }",
            json!({ "id": article["id"] }),
            Some(&bob),
        )
        .await;
    assert_eq!(error_code(&vote), "BANNED", "{vote}");
    assert_eq!(vote["errors"][0]["extensions"]["until"], until.as_str());
    let body = log_in(&m, "bob").await;
    assert_eq!(error_code(&body), "BANNED", "{body}");
    assert_eq!(body["errors"][0]["extensions"]["until"], until.as_str());
    // A wrong password learns nothing of the ban.
    let wrong = m
        .app
        .gql(
            "mutation { logIn(name: \"bob\", password: \"not-bobs-pw\") { token } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(error_code(&wrong), "UNAUTHENTICATED");

    // For good: no end.
    m.app
        .gql_ok(ban, json!({ "n": "alice", "u": null }), Some(&m.moderator))
        .await;
    let body = log_in(&m, "alice").await;
    assert_eq!(error_code(&body), "BANNED");
    assert!(body["errors"][0]["extensions"]["until"].is_null(), "{body}");

    let unban = "mutation { unbanUser(name: \"bob\") { banned } }";
    m.app.gql_ok(unban, json!({}), Some(&m.moderator)).await;
    let body = log_in(&m, "bob").await;
    let token = body["data"]["logIn"]["token"]
        .as_str()
        .expect("logged in again");
    let me = m.at_other(ME, json!({}), Some(token)).await;
    assert_eq!(me["data"]["me"]["name"], "bob");
    let old = m.app.vote(&bob, article["id"].as_str().unwrap()).await;
    assert_eq!(
        error_code(&old),
        "UNAUTHENTICATED",
        "the banned session stays ended"
    );
}

#[tokio::test]
async fn a_ban_can_remove_every_article_of_the_user_each_with_its_entry() {
    let m = Moderated::start_with(|s| {
        s.flag_threshold = 1;
        (s.flag_min_account_age_secs, s.flag_min_karma) = (0, 0);
    })
    .await;
    let bob = m.app.sign_up("bob").await;
    let mut ids = Vec::new();
    for title in ["one", "two", "three"] {
        ids.push(
            m.app.post(&bob, title, &[]).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let flag = "mutation($id: ID!) { flag(articleId: $id) { id } }";
    m.app
        .gql_ok(flag, json!({ "id": ids[0] }), Some(&m.alice))
        .await;

    let ban =
        "mutation { banUser(name: \"bob\", reason: \"spammer\", removeArticles: true) { name } }";
    m.app.gql_ok(ban, json!({}), Some(&m.moderator)).await;

    let status = "query($id: ID!) { article(id: $id) { status } }";
    for id in &ids {
        let data = m
            .app
            .gql_ok(status, json!({ "id": id }), Some(&m.moderator))
            .await;
        assert_eq!(data["article"]["status"], "REMOVED", "{id}");
    }
    assert_eq!(
        m.app.gql_ok("{ articleCount }", json!({}), None).await["articleCount"],
        0
    );
    let actions: Vec<Value> = m
        .log(Some(&m.moderator))
        .await
        .iter()
        .map(|e| e["action"].clone())
        .collect();
    assert_eq!(
        actions[..5],
        [
            "REMOVE_ARTICLE",
            "REMOVE_ARTICLE",
            "REMOVE_ARTICLE",
            "BAN_USER",
            "HIDE_ARTICLE"
        ]
    );
}

#[tokio::test]
async fn a_ban_reaches_sessions_started_by_an_earlier_version() {
    let m = Moderated::start().await;
    // A session as versions without `user:<name>:sessions` wrote it.
    let token = "a-token-from-before";
    let hash = votegraph_api::auth::token_hash(token);
    let mut redis = m.app.redis.conn().await;
    let () = redis::pipe()
        .set_ex(format!("session:{hash}"), "alice", 3600)
        .del("index:user-sessions:built")
        .query_async(&mut redis)
        .await
        .unwrap();
    // The next instance to start files it.
    let _third = spawn_server(test_settings(&m.app.redis)).await;
    let me = m.app.gql_ok(ME, json!({}), Some(token)).await;
    assert_eq!(me["me"]["name"], "alice");

    let ban = "mutation { banUser(name: \"alice\", reason: \"spam\") { name } }";
    m.app.gql_ok(ban, json!({}), Some(&m.moderator)).await;
    let body = m.app.gql("{ me { name } }", json!({}), Some(token)).await;
    assert!(body["data"]["me"].is_null(), "{body}");
    let post = m
        .app
        .gql(
            "mutation { post(title: \"t\", link: \"https://e.com/\") { id } }",
            json!({}),
            Some(token),
        )
        .await;
    assert_eq!(error_code(&post), "BANNED", "{post}");
}

/// A mutation sent over `socket` as operation `id`; its result.
async fn over_socket(socket: &mut WsClient, id: &str, query: &str) -> Value {
    socket.subscribe(id, query, json!({})).await;
    socket.next_raw().await["payload"].clone()
}

/// Bans `name` for two seconds as the admin, waits the ban out, and logs
/// `name` in again: the ban's mark stays on the account.
async fn serve_short_ban(m: &Moderated, name: &str) -> String {
    let until = chrono::Utc::now() + chrono::Duration::seconds(2);
    let until = until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let ban = "mutation($n: String!, $u: DateTime) { banUser(name: $n, reason: \"r\", until: $u) { banned } }";
    let vars = json!({ "n": name, "u": until });
    m.app.gql_ok(ban, vars, Some(&m.admin)).await;
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let body = log_in(m, name).await;
    body["data"]["logIn"]["token"]
        .as_str()
        .expect("logged in")
        .to_owned()
}

#[tokio::test]
async fn a_demoted_admin_acts_as_a_member_at_once_even_after_an_expired_ban() {
    let m = Moderated::start().await;
    m.app.sign_up("xavi").await;
    serve_short_ban(&m, "xavi").await;
    let promote = "mutation { setRole(name: \"xavi\", role: ADMIN) { role } }";
    m.app.gql_ok(promote, json!({}), Some(&m.admin)).await;
    let x = log_in(&m, "xavi").await["data"]["logIn"]["token"]
        .as_str()
        .expect("logged in")
        .to_owned();
    let mut socket = socket(&m.other.address, &x).await;
    let demote = "mutation { setRole(name: \"xavi\", role: MEMBER) { role } }";
    let data = m.app.gql_ok(demote, json!({}), Some(&m.admin)).await;
    assert_eq!(data["setRole"]["role"], "MEMBER");

    let me = m.at_other(ME, json!({}), Some(&x)).await;
    assert_eq!(
        me["data"]["me"],
        json!({ "name": "xavi", "role": "MEMBER" })
    );
    let coup = "mutation { setRole(name: \"root\", role: MEMBER) { role } }";
    assert_eq!(
        error_code(&m.at_other(coup, json!({}), Some(&x)).await),
        "FORBIDDEN"
    );
    assert_eq!(
        error_code(&m.app.gql(promote, json!({}), Some(&x)).await),
        "FORBIDDEN"
    );
    let over_ws = over_socket(&mut socket, "1", coup).await;
    assert_eq!(
        over_ws["errors"][0]["extensions"]["code"], "FORBIDDEN",
        "{over_ws}"
    );
    let me = m.app.gql_ok(ME, json!({}), Some(&m.admin)).await;
    assert_eq!(me["me"]["role"], "ADMIN", "the real admin stays one");
}

#[tokio::test]
async fn a_demoted_moderator_loses_removal_at_once_on_every_transport() {
    let m = Moderated::start().await;
    let article = m.app.post(&m.alice, "a story", &[]).await;
    let moderator = serve_short_ban(&m, "mod").await;
    let mut live = socket(&m.other.address, &moderator).await;
    let demote = "mutation { setRole(name: \"mod\", role: MEMBER) { role } }";
    m.app.gql_ok(demote, json!({}), Some(&m.admin)).await;

    let remove = format!(
        "mutation {{ removeArticle(articleId: \"{}\", reason: \"r\") {{ id }} }}",
        article["id"].as_str().unwrap()
    );
    let body = m.at_other(&remove, json!({}), Some(&moderator)).await;
    assert_eq!(error_code(&body), "FORBIDDEN", "{body}");
    let over_ws = over_socket(&mut live, "1", &remove).await;
    assert_eq!(
        over_ws["errors"][0]["extensions"]["code"], "FORBIDDEN",
        "{over_ws}"
    );
}

#[tokio::test]
async fn every_argument_naming_a_user_takes_any_case_of_the_name() {
    let m = Moderated::start().await;
    let set = "mutation($n: String!) { setRole(name: $n, role: MODERATOR) { name role } }";
    let data = m
        .app
        .gql_ok(set, json!({ "n": "ALICE" }), Some(&m.admin))
        .await;
    assert_eq!(
        data["setRole"],
        json!({ "name": "alice", "role": "MODERATOR" })
    );
    m.app.sign_up("bob").await;
    let ban = "mutation($n: String!) { banUser(name: $n, reason: \"spam\") { name banned } }";
    let data = m
        .app
        .gql_ok(ban, json!({ "n": "BoB" }), Some(&m.moderator))
        .await;
    assert_eq!(data["banUser"], json!({ "name": "bob", "banned": true }));
    let unban = "mutation($n: String!) { unbanUser(name: $n) { name banned } }";
    let data = m
        .app
        .gql_ok(unban, json!({ "n": "BOB" }), Some(&m.moderator))
        .await;
    assert_eq!(data["unbanUser"], json!({ "name": "bob", "banned": false }));

    let log = "query($u: String) { modLog(user: $u) { totalCount edges { node { action user { name } } } } }";
    let exact = m.app.gql_ok(log, json!({ "u": "bob" }), None).await;
    assert_eq!(exact["modLog"]["totalCount"], 2, "{exact}");
    for typed in ["BOB", "Bob", "bOb"] {
        let data = m.app.gql_ok(log, json!({ "u": typed }), None).await;
        assert_eq!(data, exact, "modLog(user: {typed:?})");
    }
    // No such user, or no such name: nothing.
    for typed in ["nobody", "b", "not a name"] {
        let data = m.app.gql_ok(log, json!({ "u": typed }), None).await;
        assert_eq!(data["modLog"]["totalCount"], 0, "{typed:?}: {data}");
    }

    let node = "query($id: ID!, $ids: [ID!]!) { node(id: $id) { id ... on User { name role } } \
                nodes(ids: $ids) { id ... on User { name } } }";
    let vars = json!({ "id": "user:ALICE", "ids": ["user:Bob", "user:bob", "user:NOBODY"] });
    let data = m.app.gql_ok(node, vars, None).await;
    assert_eq!(
        data["node"],
        json!({ "id": "user:alice", "name": "alice", "role": "MODERATOR" })
    );
    let bob = json!({ "id": "user:bob", "name": "bob" });
    assert_eq!(data["nodes"], json!([bob, bob, null]));
}
