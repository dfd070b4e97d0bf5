use std::collections::HashMap;

use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::{error_code, ids, now, spawn_app, spawn_app_with, ARTICLE_FIELDS};

const WEEK: f64 = 7.0 * 86_400.0;

#[tokio::test]
async fn posting_writes_the_books_keys_and_returns_the_article() {
    let app = spawn_app().await;
    let token = app.sign_up("alice").await;
    let before = now();
    let article = app.post(&token, "Hello Redis", &["redis", "db"]).await;
    let after = now();

    assert_eq!(article["id"], "1");
    assert_eq!(article["title"], "Hello Redis");
    assert_eq!(article["link"], "https://example.com/Hello-Redis");
    assert_eq!(article["poster"]["name"], "alice");
    assert_eq!(article["votes"], 1);
    assert_eq!(article["groups"], json!(["db", "redis"]));
    let posted_at =
        chrono::DateTime::parse_from_rfc3339(article["postedAt"].as_str().unwrap()).unwrap();
    assert!(article["postedAt"].as_str().unwrap().ends_with('Z'));
    let posted = posted_at.timestamp_millis() as f64 / 1000.0;
    assert!(posted >= before - 1.0 && posted <= after + 1.0);

    let mut redis = app.redis.conn().await;
    let hash: HashMap<String, String> = redis.hgetall("article:1").await.unwrap();
    assert_eq!(hash["title"], "Hello Redis");
    assert_eq!(hash["poster"], "user:alice");
    assert_eq!(hash["votes"], "1");
    let time: f64 = hash["time"].parse().unwrap();
    assert_eq!(
        redis
            .zscore::<_, _, f64>("time:", "article:1")
            .await
            .unwrap(),
        time
    );
    assert_eq!(
        redis
            .zscore::<_, _, f64>("score:", "article:1")
            .await
            .unwrap(),
        time + 432.0
    );
    assert_eq!(article["score"].as_f64().unwrap(), time + 432.0);
    assert_eq!(redis.get::<_, i64>("article:").await.unwrap(), 1);
    let voters: Vec<String> = redis.smembers("voted:1").await.unwrap();
    assert_eq!(voters, vec!["user:alice"]);
    let ttl: i64 = redis.ttl("voted:1").await.unwrap();
    assert!(ttl > WEEK as i64 - 60 && ttl <= WEEK as i64, "ttl {ttl}");
    assert!(redis
        .sismember::<_, _, bool>("group:redis", "article:1")
        .await
        .unwrap());
}

#[tokio::test]
async fn a_vote_adds_432_once_per_user() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let article = app.post(&alice, "votable", &[]).await;
    let id = article["id"].as_str().unwrap();
    let score0 = article["score"].as_f64().unwrap();

    let voted = app.vote(&bob, id).await;
    assert_eq!(voted["data"]["vote"]["votes"], 2, "{voted}");
    assert_eq!(
        voted["data"]["vote"]["score"].as_f64().unwrap(),
        score0 + 432.0
    );

    // Voting again, or the poster voting for their own article, changes nothing.
    for token in [&bob, &alice] {
        let again = app.vote(token, id).await;
        assert_eq!(again["data"]["vote"]["votes"], 2, "{again}");
        assert_eq!(
            again["data"]["vote"]["score"].as_f64().unwrap(),
            score0 + 432.0
        );
    }
    let mut redis = app.redis.conn().await;
    assert_eq!(
        redis.scard::<_, i64>(format!("voted:{id}")).await.unwrap(),
        2
    );
}

#[tokio::test]
async fn voting_closes_one_week_after_posting() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let id = app.post(&alice, "old news", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Age the article as if posted eight days ago.
    let old = now() - 8.0 * 86_400.0;
    let mut redis = app.redis.conn().await;
    let member = format!("article:{id}");
    let _: () = redis.hset(&member, "time", old).await.unwrap();
    let _: () = redis.zadd("time:", &member, old).await.unwrap();
    let _: () = redis.zadd("score:", &member, old + 432.0).await.unwrap();

    let body = app.vote(&bob, &id).await;
    assert_eq!(error_code(&body), "VOTING_CLOSED", "{body}");
    assert!(body["data"].is_null());
    assert_eq!(redis.hget::<_, _, i64>(&member, "votes").await.unwrap(), 1);
    assert_eq!(
        redis.zscore::<_, _, f64>("score:", &member).await.unwrap(),
        old + 432.0
    );
    assert!(!redis
        .sismember::<_, _, bool>(format!("voted:{id}"), "user:bob")
        .await
        .unwrap());

    // Six days old is still open.
    let recent = now() - 6.0 * 86_400.0;
    let _: () = redis.zadd("time:", &member, recent).await.unwrap();
    let body = app.vote(&bob, &id).await;
    assert_eq!(body["data"]["vote"]["votes"], 2, "{body}");
}

#[tokio::test]
async fn voting_on_a_missing_article_is_not_found() {
    let app = spawn_app().await;
    let bob = app.sign_up("bob").await;
    let body = app.vote(&bob, "999").await;
    assert_eq!(error_code(&body), "NOT_FOUND");
    let body = app.vote(&bob, "abc").await;
    assert_eq!(error_code(&body), "BAD_USER_INPUT");
    assert_eq!(body["errors"][0]["extensions"]["field"], "articleId");
    let mut redis = app.redis.conn().await;
    let keys: Vec<String> = redis.keys("voted:*").await.unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

#[tokio::test]
async fn articles_are_ranked_by_score_or_by_time() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let carol = app.sign_up("carol").await;
    let a = app.post(&alice, "a", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let b = app.post(&alice, "b", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let c = app.post(&alice, "c", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.vote(&bob, &a).await;
    app.vote(&carol, &a).await;
    app.vote(&bob, &b).await;

    assert_eq!(
        app.front_page_ids("SCORE", 1, 25).await,
        vec![a.clone(), b.clone(), c.clone()]
    );
    assert_eq!(
        app.front_page_ids("NEWEST", 1, 25).await,
        vec![c.clone(), b.clone(), a.clone()]
    );
    // SCORE is the default order.
    let data = app
        .gql_ok("{ articles { id } articleCount }", json!({}), None)
        .await;
    assert_eq!(ids(&data["articles"]), vec![a, b, c]);
    assert_eq!(data["articleCount"], 3);
}

#[tokio::test]
async fn pages_split_the_ranking() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    for i in 1..=5 {
        app.post(&alice, &format!("post {i}"), &[]).await;
    }
    assert_eq!(app.front_page_ids("NEWEST", 1, 2).await, vec!["5", "4"]);
    assert_eq!(app.front_page_ids("NEWEST", 2, 2).await, vec!["3", "2"]);
    assert_eq!(app.front_page_ids("NEWEST", 3, 2).await, vec!["1"]);
    assert!(app.front_page_ids("NEWEST", 4, 2).await.is_empty());
    assert_eq!(app.front_page_ids("SCORE", 1, 25).await.len(), 5);
}

#[tokio::test]
async fn one_article_by_id() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let posted = app.post(&alice, "findable", &["news"]).await;
    let query = format!("query($id: ID!) {{ article(id: $id) {{ {ARTICLE_FIELDS} }} }}");
    let data = app.gql_ok(&query, json!({ "id": "1" }), None).await;
    assert_eq!(data["article"], posted);
    let data = app.gql_ok(&query, json!({ "id": "2" }), None).await;
    assert!(data["article"].is_null());
}

#[tokio::test]
async fn two_hundred_concurrent_voters_add_exactly_two_hundred_votes() {
    // 400 requests at once may need 400 connections from 127.0.0.1, past
    // the default per-address cap (256), whose refusals would make the
    // test depend on how fast earlier requests finish.
    let app = spawn_app_with(|s| s.max_connections_per_client = 1_024).await;
    let alice = app.sign_up("alice").await;
    let article = app.post(&alice, "popular", &["hot"]).await;
    let id = article["id"].as_str().unwrap().to_owned();
    let score0 = article["score"].as_f64().unwrap();

    let mut tokens = Vec::new();
    for chunk in (0..200).collect::<Vec<_>>().chunks(50) {
        let signups = chunk.iter().map(|i| {
            let app = &app;
            async move { app.sign_up(&format!("voter{i}")).await }
        });
        tokens.extend(futures_util::future::join_all(signups).await);
    }
    // Every voter votes twice at once: the second must be a no-op.
    let votes = tokens.iter().chain(tokens.iter()).map(|t| app.vote(t, &id));
    for body in futures_util::future::join_all(votes).await {
        assert!(body.get("errors").is_none(), "{body}");
    }

    let query = "query($id: ID!) { article(id: $id) { votes score } }";
    let data = app.gql_ok(query, json!({ "id": id }), None).await;
    assert_eq!(data["article"]["votes"], 201);
    assert_eq!(
        data["article"]["score"].as_f64().unwrap(),
        score0 + 200.0 * 432.0
    );
    let mut redis = app.redis.conn().await;
    assert_eq!(
        redis.scard::<_, i64>(format!("voted:{id}")).await.unwrap(),
        201
    );
}
