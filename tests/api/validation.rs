use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::{error_code, spawn_app};

#[tokio::test]
async fn sign_up_rejects_bad_names_and_passwords() {
    let app = spawn_app().await;
    let cases = [
        ("al", "long enough", "name"),
        (&*"a".repeat(33), "long enough", "name"),
        ("has space", "long enough", "name"),
        ("user:x", "long enough", "name"),
        ("alice", "short", "password"),
        ("alice", &*"p".repeat(257), "password"),
    ];
    for (name, password, field) in cases {
        let body = app
            .gql(
                "mutation($n: String!, $p: String!) { signUp(name: $n, password: $p) { token } }",
                json!({ "n": name, "p": password }),
                None,
            )
            .await;
        assert_eq!(error_code(&body), "BAD_USER_INPUT", "{name}: {body}");
        assert_eq!(body["errors"][0]["extensions"]["field"], field);
        assert!(body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains(field));
    }
    // Boundaries that are allowed.
    for (name, password) in [("abc", "12345678"), (&*"z".repeat(32), &*"p".repeat(256))] {
        let body = app
            .gql(
                "mutation($n: String!, $p: String!) { signUp(name: $n, password: $p) { token } }",
                json!({ "n": name, "p": password }),
                None,
            )
            .await;
        assert!(body["data"]["signUp"]["token"].is_string(), "{body}");
    }
    let mut redis = app.redis.conn().await;
    let mut users: Vec<String> = redis.keys("user:*").await.unwrap();
    // Accounts only, not their `user:<name>:<attr>` keys.
    users.retain(|key| key.matches(':').count() == 1);
    assert_eq!(
        users.len(),
        2,
        "only the valid sign-ups were stored: {users:?}"
    );
}

#[tokio::test]
async fn post_rejects_bad_titles_links_and_groups_and_writes_nothing() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    let long_link = format!("https://example.com/{}", "a".repeat(2030));
    let cases = [
        ("   ", "https://example.com", json!([]), "title"),
        (&*"t".repeat(301), "https://example.com", json!([]), "title"),
        ("ok", "ftp://example.com/file", json!([]), "link"),
        ("ok", "/relative/path", json!([]), "link"),
        ("ok", "not a url", json!([]), "link"),
        ("ok", &*long_link, json!([]), "link"),
        ("ok", "https://example.com", json!(["UPPER"]), "groups"),
        (
            "ok",
            "https://example.com",
            json!(["ok", "_leading"]),
            "groups",
        ),
        (
            "ok",
            "https://example.com",
            json!([&*"g".repeat(65)]),
            "groups",
        ),
    ];
    for (title, link, groups, field) in cases {
        let body = app
            .gql(
                "mutation($t: String!, $l: String!, $g: [String!]!) { post(title: $t, link: $l, groups: $g) { id } }",
                json!({ "t": title, "l": link, "g": groups }),
                Some(&token),
            )
            .await;
        assert_eq!(error_code(&body), "BAD_USER_INPUT", "{field}: {body}");
        assert_eq!(body["errors"][0]["extensions"]["field"], field, "{body}");
    }
    let mut redis = app.redis.conn().await;
    assert!(
        !redis.exists::<_, bool>("article:").await.unwrap(),
        "no id was handed out"
    );
    assert!(!redis.exists::<_, bool>("score:").await.unwrap());

    // The limits themselves are allowed; the title is stored trimmed.
    let body = app
        .gql(
            "mutation($t: String!, $l: String!) { post(title: $t, link: $l, groups: [\"ok\", \"ok\"]) { title link groups } }",
            json!({ "t": format!("  {}  ", "t".repeat(300)), "l": format!("http://e.co/{}", "a".repeat(2036)) }),
            Some(&token),
        )
        .await;
    assert_eq!(
        body["data"]["post"]["title"].as_str().unwrap().len(),
        300,
        "{body}"
    );
    assert_eq!(body["data"]["post"]["link"].as_str().unwrap().len(), 2048);
    assert_eq!(body["data"]["post"]["groups"], json!(["ok"]));
}

#[tokio::test]
async fn paging_arguments_are_bounded() {
    let app = spawn_app().await;
    for (page, size, field) in [
        (0, 25, "page"),
        (10_001, 25, "page"),
        (1, 0, "pageSize"),
        (1, 101, "pageSize"),
        (-1, 10, "page"),
    ] {
        for query in [
            "query($p: Int!, $s: Int!) { articles(page: $p, pageSize: $s) { id } }",
            "query($p: Int!, $s: Int!) { group(name: \"g\") { articles(page: $p, pageSize: $s) { id } } }",
        ] {
            let body = app.gql(query, json!({ "p": page, "s": size }), None).await;
            assert_eq!(error_code(&body), "BAD_USER_INPUT", "{page}/{size}: {body}");
            assert_eq!(body["errors"][0]["extensions"]["field"], field);
        }
    }
    let ok = app
        .gql_ok(
            "{ articles(page: 10000, pageSize: 100) { id } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(ok["articles"], json!([]));
}

#[tokio::test]
async fn malformed_ids_and_documents_get_codes() {
    let app = spawn_app().await;
    let body = app
        .gql("{ article(id: \"seven\") { id } }", json!({}), None)
        .await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT");
    assert_eq!(body["errors"][0]["extensions"]["field"], "id");

    let body = app.gql("{ articles { id ", json!({}), None).await;
    assert_eq!(error_code(&body), "GRAPHQL_PARSE_FAILED", "{body}");
    let body = app.gql("{ articles { nope } }", json!({}), None).await;
    assert_eq!(error_code(&body), "GRAPHQL_VALIDATION_FAILED", "{body}");
}
