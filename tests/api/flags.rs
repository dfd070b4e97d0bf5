//! Which flags hide an article: only those of accounts old enough and with
//! karma enough, and never again those of accounts whose flags a restore
//! cleared. Every flag still counts in `Article.flags` and the queue.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::Moderated;

const FLAG: &str = "mutation($id: ID!) { flag(articleId: $id, reason: \"spam\") { id } }";
const SHOWN: &str = "query($id: ID!) { article(id: $id) { id status flags } }";
const QUEUE: &str = "{ moderationQueue { edges { node { id flags status } } } }";
const LISTED: &str = "{ articles(order: NEWEST) { id } }";

/// Signs up `n` accounts named `<prefix><i>`; their tokens.
async fn accounts(m: &Moderated, prefix: &str, n: usize) -> Vec<String> {
    let mut tokens = Vec::new();
    for i in 0..n {
        tokens.push(m.app.sign_up(&format!("{prefix}{i}")).await);
    }
    tokens
}

/// An article posted by the admin; its id.
async fn admins_article(m: &Moderated) -> String {
    let article = m.app.post(&m.admin, "the admin's notes", &["news"]).await;
    article["id"].as_str().unwrap().to_owned()
}

async fn flag_as(m: &Moderated, tokens: &[String], id: &str) {
    for token in tokens {
        m.app.gql_ok(FLAG, json!({ "id": id }), Some(token)).await;
    }
}

/// Whether an anonymous reader sees article `id`, by id and on the front
/// page.
async fn public(m: &Moderated, id: &str) -> bool {
    let by_id = m.app.gql_ok(SHOWN, json!({ "id": id }), None).await;
    let page = m.app.gql_ok(LISTED, json!({}), None).await;
    let listed = page["articles"].as_array().unwrap();
    let on_page = listed.iter().any(|a| a["id"] == id);
    assert_eq!(by_id["article"].is_null(), !on_page, "{by_id} {page}");
    on_page
}

/// Article `id` as moderators see it: `{status, flags}`.
async fn moderated(m: &Moderated, id: &str) -> Value {
    let data = m
        .app
        .gql_ok(SHOWN, json!({ "id": id }), Some(&m.moderator))
        .await;
    json!({ "status": data["article"]["status"], "flags": data["article"]["flags"] })
}

/// Article `id`'s entry in the moderators' queue, if there.
async fn queued(m: &Moderated, id: &str) -> Option<Value> {
    let queue = m.app.gql_ok(QUEUE, json!({}), Some(&m.moderator)).await;
    let edges = queue["moderationQueue"]["edges"].as_array().unwrap();
    edges
        .iter()
        .map(|e| e["node"].clone())
        .find(|n| n["id"] == id)
}

#[tokio::test]
async fn five_fresh_accounts_cannot_hide_an_article() {
    let m = Moderated::start().await;
    let id = admins_article(&m).await;
    let brigade = accounts(&m, "brigade", 5).await;
    flag_as(&m, &brigade, &id).await;

    assert!(public(&m, &id).await, "still in every view");
    assert_eq!(
        moderated(&m, &id).await,
        json!({ "status": "FLAGGED", "flags": 5 })
    );
    assert_eq!(
        queued(&m, &id).await,
        Some(json!({ "id": id, "flags": 5, "status": "FLAGGED" })),
        "the moderators see every flag"
    );
}

#[tokio::test]
async fn flags_of_accounts_with_karma_enough_hide_an_article() {
    let m = Moderated::start_with(|s| {
        s.flag_min_account_age_secs = 0;
        s.flag_min_karma = 1;
    })
    .await;
    let id = admins_article(&m).await;
    let (newcomers, posters) = (
        accounts(&m, "new", 5).await,
        accounts(&m, "poster", 5).await,
    );
    // A post is a point of karma.
    for (i, token) in posters.iter().enumerate() {
        m.app.post(token, &format!("story {i}"), &[]).await;
    }
    flag_as(&m, &newcomers, &id).await;
    assert!(public(&m, &id).await, "accounts without karma do not hide");
    flag_as(&m, &posters[..4], &id).await;
    assert!(public(&m, &id).await, "four flags that count");
    flag_as(&m, &posters[4..], &id).await;
    assert!(!public(&m, &id).await, "the fifth that counts hides it");
    assert_eq!(
        moderated(&m, &id).await,
        json!({ "status": "HIDDEN", "flags": 10 })
    );
}

#[tokio::test]
async fn flags_of_accounts_old_enough_hide_an_article() {
    let m = Moderated::start_with(|s| {
        s.flag_min_account_age_secs = 2;
        s.flag_min_karma = 0;
    })
    .await;
    let id = admins_article(&m).await;
    let elders = accounts(&m, "elder", 4).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let newcomers = accounts(&m, "new", 6).await;
    flag_as(&m, &newcomers[..5], &id).await;
    assert!(public(&m, &id).await, "accounts too young do not hide");

    // An account kept without a creation time (made before accounts
    // recorded one) counts as old enough.
    let mut redis = m.app.redis.conn().await;
    let () = redis::cmd("HDEL")
        .arg("user:new5")
        .arg("created")
        .query_async(&mut redis)
        .await
        .unwrap();
    flag_as(&m, &elders, &id).await;
    assert!(public(&m, &id).await, "four flags that count");
    flag_as(&m, &newcomers[5..], &id).await;
    assert!(!public(&m, &id).await, "the fifth that counts hides it");
}

#[tokio::test]
async fn after_a_restore_the_same_accounts_cannot_hide_the_article_again() {
    let m = Moderated::start_with(|s| {
        s.flag_min_account_age_secs = 0;
        s.flag_min_karma = 0;
    })
    .await;
    let id = admins_article(&m).await;
    let first = accounts(&m, "first", 5).await;
    flag_as(&m, &first, &id).await;
    assert!(!public(&m, &id).await, "accounts over the floors hide it");

    m.restore(&id).await;
    assert!(public(&m, &id).await);
    flag_as(&m, &first, &id).await;
    assert!(public(&m, &id).await, "their flags were cleared once");
    assert_eq!(
        moderated(&m, &id).await,
        json!({ "status": "FLAGGED", "flags": 5 })
    );
    assert_eq!(
        queued(&m, &id).await.map(|n| n["flags"].clone()),
        Some(json!(5))
    );

    // Other accounts still can.
    let others = accounts(&m, "other", 5).await;
    flag_as(&m, &others, &id).await;
    assert!(!public(&m, &id).await);
    assert_eq!(
        moderated(&m, &id).await,
        json!({ "status": "HIDDEN", "flags": 10 })
    );
}
