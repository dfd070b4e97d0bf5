//! The group directory (`Query.groups`): largest first, paged by cursors,
//! exact counts, groups written by the book's code, cursor errors, cost,
//! and fresh pages after a post.

use std::time::Duration;

use redis::AsyncCommands;
use serde_json::{json, Value};

use crate::helpers::{
    done_if, error_code, eventually_every, gql_at, sign_up_at, spawn_app, spawn_app_on,
    spawn_app_tending, spawn_server, test_settings, TestApp, TestRedis,
};

const GROUPS: &str = "query($n: Int!, $a: String) { groups(first: $n, after: $a) {
  totalCount pageInfo { hasNextPage endCursor } edges { cursor node { name articleCount } } } }";

/// Every page of the directory, `first` at a time: (name, count) in order.
async fn directory(app: &TestApp, first: i64) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..100 {
        let data = app
            .gql_ok(GROUPS, json!({ "n": first, "a": after }), None)
            .await;
        let page = &data["groups"];
        for edge in page["edges"].as_array().unwrap() {
            out.push((
                edge["node"]["name"].as_str().unwrap().to_owned(),
                edge["node"]["articleCount"].as_i64().unwrap(),
            ));
        }
        if !page["pageInfo"]["hasNextPage"].as_bool().unwrap() {
            return out;
        }
        after = page["pageInfo"]["endCursor"].as_str().map(str::to_owned);
    }
    panic!("the directory never ended");
}

fn pairs(list: &[(&str, i64)]) -> Vec<(String, i64)> {
    list.iter().map(|(n, c)| (n.to_string(), *c)).collect()
}

/// Waits (5 s at most: the upkeep ticks every 100 ms) until the directory
/// lists `want`, 10 at a time.
async fn wait_for_directory(app: &TestApp, what: &str, want: Vec<(String, i64)>) {
    let every = Duration::from_millis(50);
    eventually_every(what, Duration::from_secs(5), every, async || {
        let listed = directory(app, 10).await;
        done_if(listed == want, listed)
    })
    .await;
}

#[tokio::test]
async fn groups_come_largest_first_page_by_page_with_exact_counts() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    for (i, groups) in [
        vec!["rust", "news"],
        vec!["rust"],
        vec!["rust", "go"],
        vec!["news", "go"],
        vec!["zig"],
        vec!["rust"],
        vec![],
    ]
    .iter()
    .enumerate()
    {
        app.post(&alice, &format!("a{i}"), groups).await;
    }
    let want = pairs(&[("rust", 4), ("go", 2), ("news", 2), ("zig", 1)]);
    for first in [1, 2, 3, 10] {
        assert_eq!(directory(&app, first).await, want, "first {first}");
    }
    let data = app.gql_ok(GROUPS, json!({ "n": 2, "a": null }), None).await;
    assert_eq!(data["groups"]["totalCount"], 4);
    // The counts agree with each group's own.
    let rust = app
        .gql_ok(
            "{ group(name: \"rust\") { articleCount } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(rust["group"]["articleCount"], 4);

    // Group changes move groups at once (the cached page is dropped), and
    // a group left empty leaves the directory.
    app.gql_ok(
        "mutation { setGroups(articleId: \"5\", add: [\"go\"], remove: [\"zig\"]) { id } }",
        json!({}),
        Some(&alice),
    )
    .await;
    assert_eq!(
        directory(&app, 10).await,
        pairs(&[("rust", 4), ("go", 3), ("news", 2)])
    );
    app.post(&alice, "more news", &["news", "news2"]).await;
    app.post(&alice, "even more", &["news"]).await;
    assert_eq!(
        directory(&app, 10).await,
        pairs(&[("news", 4), ("rust", 4), ("go", 3), ("news2", 1)])
    );
}

#[tokio::test]
async fn a_cursor_holds_its_place_while_other_groups_change() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    for g in ["a", "b", "c", "d", "e"] {
        app.post(&alice, g, &[g]).await;
    }
    app.post(&alice, "big", &["a"]).await;
    let data = app.gql_ok(GROUPS, json!({ "n": 2, "a": null }), None).await;
    let first: Vec<&str> = data["groups"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(first, ["a", "b"]);
    let cursor = data["groups"]["pageInfo"]["endCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    // "e" grows past everyone meanwhile: it moved, so the reader, who is
    // past its new place, does not see it again; c and d did not move.
    app.post(&alice, "e1", &["e"]).await;
    app.post(&alice, "e2", &["e"]).await;
    let next = app
        .gql_ok(GROUPS, json!({ "n": 10, "a": cursor }), None)
        .await;
    let rest: Vec<&str> = next["groups"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(rest, ["c", "d"]);
}

#[tokio::test]
async fn groups_written_by_the_books_code_are_counted() {
    // Before votegraph's first start: the book's `add_remove_groups`.
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    for (group, n) in [("programming", 3), ("python", 1)] {
        for id in 0..n {
            let _: () = conn
                .sadd(format!("group:{group}"), format!("article:{id}"))
                .await
                .unwrap();
        }
    }
    let app = spawn_app_tending(redis).await;
    let want = pairs(&[("programming", 3), ("python", 1)]);
    wait_for_directory(&app, "the book's groups to be listed", want).await;
    // After it: the book adds to a listed group; the upkeep's recount
    // brings the directory in line within a sweep.
    for id in 10..13 {
        let _: () = conn
            .sadd("group:python", format!("article:{id}"))
            .await
            .unwrap();
    }
    let want = pairs(&[("python", 4), ("programming", 3)]);
    wait_for_directory(&app, "the book's additions to be counted", want).await;
}

/// A group the book's code emptied while no server ran leaves the
/// directory at the next start: no scan of the group sets finds a set that
/// is gone, so its mirror stands for it.
#[tokio::test]
async fn a_group_emptied_while_no_server_ran_leaves_the_directory() {
    let redis = TestRedis::start().await;
    let first = spawn_server(test_settings(&redis)).await;
    let client = reqwest::Client::new();
    let alice = sign_up_at(&client, &first.address, "alice").await;
    let post = "mutation { post(title: \"t\", link: \"https://e.com\", groups: [\"emptied\", \"kept\"]) { id } }";
    let posted = gql_at(&client, &first.address, post, json!({}), Some(&alice), None).await;
    assert!(posted.get("errors").is_none(), "{posted}");
    drop(first);
    // Nothing follows the book's write while no server runs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut conn = redis.conn().await;
    let _: () = conn.srem("group:emptied", "article:1").await.unwrap();
    let app = spawn_app_on(redis, |_| {}).await;
    let want = pairs(&[("kept", 1)]);
    wait_for_directory(&app, "the emptied group to leave", want).await;
}

#[tokio::test]
async fn bad_cursors_sizes_and_costs_are_refused() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "x", &["rust"]).await;
    let feed = app
        .gql_ok(
            "{ feed(first: 1) { pageInfo { endCursor } } }",
            json!({}),
            None,
        )
        .await;
    let article_cursor = feed["feed"]["pageInfo"]["endCursor"].as_str().unwrap();
    for (first, after, words) in [
        (1, "nope", "malformed"),
        (1, article_cursor, "another list"),
        (0, "", "first must be between 1 and 100"),
        (101, "", "first must be between 1 and 100"),
    ] {
        let after: Value = if after.is_empty() {
            Value::Null
        } else {
            after.into()
        };
        let body = app
            .gql(GROUPS, json!({ "n": first, "a": after }), None)
            .await;
        assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
        let message = body["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains(words), "{message}");
    }
    let body = app
        .gql(
            "{ groups(first: 100) { edges { node { articles(pageSize: 100) { id } } } } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(error_code(&body), "QUERY_TOO_COMPLEX", "{body}");
}
