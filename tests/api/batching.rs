//! Proves the read path batches: Redis itself counts the requests it reads
//! (`total_reads_processed`) and the commands it runs (`commandstats`).

use std::time::Duration;

use serde_json::json;

use crate::helpers::{
    command_calls, eventually, reads_processed, spawn_app, spawn_app_with, TestApp, ARTICLE_FIELDS,
};

/// Runs `query` and returns (round trips to Redis, article hash reads) it cost.
async fn cost_of(app: &TestApp, query: &str) -> (u64, u64) {
    let mut redis = app.redis.conn().await;
    // Warm the pool so connection set-up is not counted.
    app.gql_ok(query, json!({}), None).await;
    app.gql_ok(query, json!({}), None).await;
    app.wait_for_derivations().await;
    let r0 = reads_processed(&mut redis).await;
    let r1 = reads_processed(&mut redis).await;
    let own = r1 - r0; // what one INFO costs
    let h1 = command_calls(&mut redis, "hmget").await;
    let r2 = reads_processed(&mut redis).await;
    app.gql_ok(query, json!({}), None).await;
    let r3 = reads_processed(&mut redis).await;
    let h2 = command_calls(&mut redis, "hmget").await;
    (r3 - r2 - own, h2 - h1)
}

async fn seeded_app() -> TestApp {
    // The response cache would answer repeated anonymous queries with no
    // Redis work at all; these tests measure the Redis work itself.
    let app = spawn_app_with(|s| s.no_response_cache = true).await;
    let alice = app.sign_up("alice").await;
    for i in 0..30 {
        let groups: &[&str] = if i % 2 == 0 {
            &["even", "all"]
        } else {
            &["all"]
        };
        app.post(&alice, &format!("article {i}"), groups).await;
    }
    app
}

#[tokio::test]
async fn a_page_of_25_articles_costs_two_round_trips() {
    let app = seeded_app().await;
    let query = format!("{{ articles(pageSize: 25) {{ {ARTICLE_FIELDS} }} }}");
    let (trips, article_reads) = cost_of(&app, &query).await;
    assert_eq!(article_reads, 25, "every article was read");
    assert!(trips <= 2, "a page took {trips} round trips to Redis");
    assert!(trips >= 1);
}

#[tokio::test]
async fn several_lists_in_one_query_cost_one_batch_each() {
    let app = seeded_app().await;
    let query = format!(
        "{{ top: articles(pageSize: 25) {{ {ARTICLE_FIELDS} }} \
           newest: articles(order: NEWEST, pageSize: 25) {{ {ARTICLE_FIELDS} }} \
           group(name: \"even\") {{ articles {{ {ARTICLE_FIELDS} }} }} \
           one: article(id: \"3\") {{ {ARTICLE_FIELDS} }} }}"
    );
    let (trips, article_reads) = cost_of(&app, &query).await;
    // Each list is one range read plus one pipeline for its whole page (a
    // page knows all its ids, so it does not wait to share a batch), and the
    // single article is one more batch: 7 round trips for 66 article slots,
    // where one per article would be 69.
    assert_eq!(article_reads, 25 + 25 + 15 + 1, "every slot read once");
    assert!(
        trips <= 7,
        "three lists and an article took {trips} round trips"
    );
}

#[tokio::test]
async fn articles_asked_for_by_id_share_one_batch() {
    let app = seeded_app().await;
    let query = format!(
        "{{ a: article(id: \"1\") {{ {ARTICLE_FIELDS} }} \
           b: article(id: \"2\") {{ {ARTICLE_FIELDS} }} \
           c: article(id: \"3\") {{ {ARTICLE_FIELDS} }} \
           d: article(id: \"4\") {{ {ARTICLE_FIELDS} }} }}"
    );
    let (trips, article_reads) = cost_of(&app, &query).await;
    assert_eq!(article_reads, 4);
    assert_eq!(trips, 1, "four articles by id took {trips} round trips");
}

#[tokio::test]
async fn a_score_page_takes_its_scores_from_the_range_read() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    for i in 0..5 {
        app.post(&token, &format!("scored {i}"), &[]).await;
    }
    let mut redis = app.redis.conn().await;
    let page = |order: &'static str| {
        app.gql_ok(
            "query($o: ArticleOrder!) { articles(order: $o) { id score myVote } }",
            json!({ "o": order }),
            Some(&token),
        )
    };
    app.wait_for_derivations().await;
    let before = command_calls(&mut redis, "zscore").await;
    let data = page("SCORE").await;
    assert_eq!(
        command_calls(&mut redis, "zscore").await,
        before,
        "no ZSCORE"
    );
    // The scores are the ranking's, as ZSCORE would have read them.
    for article in data["articles"].as_array().unwrap() {
        let member = format!("article:{}", article["id"].as_str().unwrap());
        let score: f64 = redis::cmd("ZSCORE")
            .arg("score:")
            .arg(&member)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(article["score"].as_f64().unwrap(), score);
        assert_eq!(article["myVote"], "UP");
    }
    // A page by time still reads each score (5 articles, 5 ZSCOREs).
    app.wait_for_derivations().await;
    let before = command_calls(&mut redis, "zscore").await;
    page("NEWEST").await;
    assert_eq!(command_calls(&mut redis, "zscore").await, before + 5);
}

#[tokio::test]
async fn an_articles_groups_come_with_its_hash_and_older_articles_get_theirs_derived() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    let first = app.post(&token, "grouped", &["rust", "redis"]).await;
    app.post(&token, "plain", &[]).await;
    let mut redis = app.redis.conn().await;
    let listed: String = redis::cmd("HGET")
        .arg("article:1")
        .arg("groups")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(listed, "redis,rust", "sorted, beside the set");
    let page = || {
        app.gql_ok(
            "{ articles { id groups } }",
            json!({}),
            Some(&token), // logged in: no response cache
        )
    };
    let before = command_calls(&mut redis, "smembers").await;
    let data = page().await;
    assert_eq!(
        command_calls(&mut redis, "smembers").await,
        before,
        "no SMEMBERS"
    );
    let groups = |data: &serde_json::Value, id: &str| {
        data["articles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == id)
            .unwrap()["groups"]
            .clone()
    };
    assert_eq!(groups(&data, "1"), json!(["redis", "rust"]));
    assert_eq!(groups(&data, "2"), json!([]));

    // setGroups keeps the field in step with the set.
    app.gql_ok(
        "mutation($id: ID!) { setGroups(articleId: $id, add: [\"go\"], remove: [\"rust\"]) { id } }",
        json!({ "id": first["id"] }),
        Some(&token),
    )
    .await;
    let listed: String = redis::cmd("HGET")
        .arg("article:1")
        .arg("groups")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(listed, "go,redis");
    // (The deriver follows setGroups' own writes too; once it is done, the
    // list below stays deleted until a read finds it missing.)
    app.wait_for_derivations().await;

    // An article whose hash has no list (written before it was kept, or by
    // another client) costs the page nothing more: it reads as in no group
    // and is derived at once, its list back within a second.
    let () = redis::cmd("HDEL")
        .arg("article:1")
        .arg("groups")
        .query_async(&mut redis)
        .await
        .unwrap();
    let data = page().await;
    assert_eq!(groups(&data, "1"), json!([]));
    eventually(
        "the list derived again",
        Duration::from_secs(1),
        async || {
            let data = page().await;
            let seen = groups(&data, "1");
            (seen == json!(["go", "redis"])).then_some(()).ok_or(seen)
        },
    )
    .await;
}
