//! Slugs (reserved with HSETNX on `slug.to.id`) and page views.

use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::{error_code, spawn_app, spawn_app_with};

const BY_SLUG: &str = "query($s: String!) { articleBySlug(slug: $s) { id slug title } }";
const RENAME: &str =
    "mutation($id: ID!, $s: String!) { renameSlug(articleId: $id, slug: $s) { id slug } }";

#[tokio::test]
async fn slugs_come_from_titles_and_stay_unique() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let q = "mutation($t: String!) { post(title: $t, link: \"https://e.com\") { id slug } }";
    let mut slugs = Vec::new();
    for _ in 0..3 {
        let data = app
            .gql_ok(q, json!({ "t": "Hello, World!" }), Some(&alice))
            .await;
        slugs.push(data["post"]["slug"].as_str().unwrap().to_owned());
    }
    assert_eq!(slugs, ["hello-world", "hello-world-2", "hello-world-3"]);
    let found = app
        .gql_ok(BY_SLUG, json!({ "s": "hello-world-2" }), None)
        .await;
    assert_eq!(found["articleBySlug"]["id"], "2");
    assert!(app.gql_ok(BY_SLUG, json!({ "s": "nope" }), None).await["articleBySlug"].is_null());
    assert!(app
        .gql_ok(BY_SLUG, json!({ "s": "Not A Slug" }), None)
        .await["articleBySlug"]
        .is_null());
}

#[tokio::test]
async fn concurrent_posts_with_one_title_get_distinct_slugs() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let q = "mutation { post(title: \"Breaking news\", link: \"https://e.com\") { id slug } }";
    let posts =
        futures_util::future::join_all((0..25).map(|_| app.gql_ok(q, json!({}), Some(&alice))))
            .await;
    let mut slugs: Vec<String> = posts
        .iter()
        .map(|p| p["post"]["slug"].as_str().unwrap().to_owned())
        .collect();
    slugs.sort();
    slugs.dedup();
    assert_eq!(slugs.len(), 25, "{slugs:?}");
    let mut redis = app.redis.conn().await;
    for post in &posts {
        let id: String = redis
            .hget("slug.to.id", post["post"]["slug"].as_str().unwrap())
            .await
            .unwrap();
        assert_eq!(id, post["post"]["id"].as_str().unwrap());
    }
}

#[tokio::test]
async fn renaming_frees_the_old_slug_and_refuses_taken_ones() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let first = app.post(&alice, "First post", &[]).await;
    let second = app.post(&alice, "Second post", &[]).await;
    assert_eq!(first["id"], "1");

    let renamed = app
        .gql_ok(RENAME, json!({ "id": "1", "s": "the-first" }), Some(&alice))
        .await;
    assert_eq!(renamed["renameSlug"]["slug"], "the-first");
    assert_eq!(
        app.gql_ok(BY_SLUG, json!({ "s": "the-first" }), None).await["articleBySlug"]["id"],
        "1"
    );
    assert!(app
        .gql_ok(BY_SLUG, json!({ "s": "first-post" }), None)
        .await["articleBySlug"]
        .is_null());
    // Renaming to its own slug is fine; the freed slug can be taken by another article.
    app.gql_ok(RENAME, json!({ "id": "1", "s": "the-first" }), Some(&alice))
        .await;
    let taken_over = app
        .gql_ok(
            RENAME,
            json!({ "id": "2", "s": "first-post" }),
            Some(&alice),
        )
        .await;
    assert_eq!(taken_over["renameSlug"]["slug"], "first-post");

    let body = app
        .gql(
            RENAME,
            json!({ "id": "1", "s": "first-post" }),
            Some(&alice),
        )
        .await;
    assert_eq!(error_code(&body), "SLUG_TAKEN", "{body}");
    let body = app
        .gql(RENAME, json!({ "id": "1", "s": "bobs-now" }), Some(&bob))
        .await;
    assert_eq!(error_code(&body), "FORBIDDEN");
    let body = app
        .gql(RENAME, json!({ "id": "1", "s": "Bad Slug" }), Some(&alice))
        .await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT");
    assert_eq!(body["errors"][0]["extensions"]["field"], "slug");
    let body = app
        .gql(RENAME, json!({ "id": "9", "s": "x" }), Some(&alice))
        .await;
    assert_eq!(error_code(&body), "NOT_FOUND");

    let mut redis = app.redis.conn().await;
    let map: std::collections::HashMap<String, String> = redis.hgetall("slug.to.id").await.unwrap();
    assert_eq!(map.len(), 2, "{map:?}");
    assert_eq!(map["the-first"], "1");
    assert_eq!(map["first-post"], "2");
    assert_eq!(second["id"], "2");
    let data = app
        .gql_ok("{ article(id: \"2\") { slug } }", json!({}), None)
        .await;
    assert_eq!(data["article"]["slug"], "first-post");
}

#[tokio::test]
async fn views_are_counted_atomically() {
    // 127.0.0.1 is a trusted proxy, so the 50 forwarded addresses are 50
    // viewers (one viewer's repeated views count once).
    let app = spawn_app_with(|s| s.trusted_proxies = "127.0.0.1".parse().unwrap()).await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "viewed", &[]).await;
    let view = "mutation { viewArticle(id: \"1\") { views } }";
    assert_eq!(
        app.gql_ok(view, json!({}), None).await["viewArticle"]["views"],
        1
    );
    let bodies = futures_util::future::join_all((0..50).map(|i| {
        let app = &app;
        async move {
            let addr = format!("198.51.100.{i}");
            app.gql_forwarded(&addr, view, json!({}), None).await
        }
    }))
    .await;
    assert!(
        bodies.iter().all(|b| b.get("errors").is_none()),
        "{bodies:?}"
    );
    let data = app
        .gql_ok("{ article(id: \"1\") { views } }", json!({}), None)
        .await;
    assert_eq!(data["article"]["views"], 51);
    let body = app
        .gql(
            "mutation { viewArticle(id: \"2\") { views } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(error_code(&body), "NOT_FOUND");
    let mut redis = app.redis.conn().await;
    assert!(
        !redis.exists::<_, bool>("article:2").await.unwrap(),
        "no hash created for a missing article"
    );
}

#[tokio::test]
async fn a_common_title_costs_the_same_to_post_however_often_it_was_used() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let mut redis = app.redis.conn().await;
    // Slugs taken before votegraph kept a suffix counter (or by renames).
    for (slug, id) in [("news", 901), ("news-2", 902), ("news-3", 903)] {
        let _: () = redis.hset("slug.to.id", slug, id).await.unwrap();
    }
    let q = "mutation { post(title: \"News\", link: \"https://e.com\") { slug } }";
    let post = || async { app.gql_ok(q, json!({}), Some(&alice)).await["post"]["slug"].clone() };
    assert_eq!(post().await, "news-4");
    for n in 5..=40 {
        assert_eq!(post().await, format!("news-{n}"));
    }
    assert_eq!(post().await, "news-41");
    let last: u64 = redis.hget("slug:last-suffix", "news").await.unwrap();
    assert_eq!(last, 41);
}
