//! Compatibility with *Redis in Action*'s own code: the book's functions are
//! replayed here command for command (`post_article`, `article_vote`,
//! `add_remove_groups`, `get_articles`, `get_group_articles`).

use std::collections::HashMap;

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::{spawn_app, ARTICLE_FIELDS};

const ONE_WEEK_IN_SECONDS: i64 = 7 * 86_400;
const VOTE_SCORE: f64 = 432.0;

fn time_time() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

async fn post_article(
    conn: &mut MultiplexedConnection,
    user: &str,
    title: &str,
    link: &str,
) -> String {
    let article_id: i64 = conn.incr("article:", 1).await.unwrap();
    let voted = format!("voted:{article_id}");
    let _: () = conn.sadd(&voted, user).await.unwrap();
    let _: () = conn.expire(&voted, ONE_WEEK_IN_SECONDS).await.unwrap();
    let now = time_time();
    let article = format!("article:{article_id}");
    let _: () = redis::cmd("HMSET")
        .arg(&article)
        .arg(&[("title", title), ("link", link), ("poster", user)])
        .arg("time")
        .arg(format!("{now:.7}")) // Python's repr of time.time()
        .arg("votes")
        .arg(1)
        .query_async(conn)
        .await
        .unwrap();
    let _: () = conn
        .zadd("score:", &article, now + VOTE_SCORE)
        .await
        .unwrap();
    let _: () = conn.zadd("time:", &article, now).await.unwrap();
    article_id.to_string()
}

async fn article_vote(conn: &mut MultiplexedConnection, user: &str, article: &str) {
    let cutoff = time_time() - ONE_WEEK_IN_SECONDS as f64;
    let posted: f64 = conn.zscore("time:", article).await.unwrap();
    if posted < cutoff {
        return;
    }
    let article_id = article.split(':').next_back().unwrap();
    let added: i64 = conn
        .sadd(format!("voted:{article_id}"), user)
        .await
        .unwrap();
    if added == 1 {
        let _: () = conn.zincr("score:", article, VOTE_SCORE).await.unwrap();
        let _: () = conn.hincr(article, "votes", 1).await.unwrap();
    }
}

async fn get_articles(
    conn: &mut MultiplexedConnection,
    page: isize,
    order: &str,
) -> Vec<HashMap<String, String>> {
    let start = (page - 1) * 25;
    let ids: Vec<String> = conn.zrevrange(order, start, start + 24).await.unwrap();
    let mut articles = Vec::new();
    for id in ids {
        let mut data: HashMap<String, String> = conn.hgetall(&id).await.unwrap();
        data.insert("id".into(), id);
        articles.push(data);
    }
    articles
}

async fn get_group_articles(
    conn: &mut MultiplexedConnection,
    group: &str,
    page: isize,
) -> Vec<HashMap<String, String>> {
    let key = format!("score:{group}");
    if !conn.exists::<_, bool>(&key).await.unwrap() {
        let _: () = redis::cmd("ZINTERSTORE")
            .arg(&key)
            .arg(2)
            .arg(format!("group:{group}"))
            .arg("score:")
            .arg("AGGREGATE")
            .arg("MAX")
            .query_async(conn)
            .await
            .unwrap();
        let _: () = conn.expire(&key, 60).await.unwrap();
    }
    get_articles(conn, page, &key).await
}

#[tokio::test]
async fn articles_written_by_the_books_code_are_served_and_votable() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let id = post_article(&mut conn, "user:83271", "A title", "http://www.google.com").await;
    let article = format!("article:{id}");
    article_vote(&mut conn, "user:115423", &article).await;
    let _: () = conn.sadd("group:programming", &article).await.unwrap();
    let score: f64 = conn.zscore("score:", &article).await.unwrap();

    let query = format!("{{ articles {{ {ARTICLE_FIELDS} }} group(name: \"programming\") {{ articles {{ id }} articleCount }} }}");
    let data = app.gql_ok(&query, json!({}), None).await;
    let served = &data["articles"][0];
    assert_eq!(served["id"], id);
    assert_eq!(served["title"], "A title");
    assert_eq!(served["link"], "http://www.google.com");
    assert_eq!(
        served["poster"]["name"], "83271",
        "the user: prefix is dropped"
    );
    assert_eq!(served["votes"], 2);
    assert_eq!(served["score"].as_f64().unwrap(), score);
    assert_eq!(data["group"]["articles"][0]["id"], id);
    assert_eq!(data["group"]["articleCount"], 1);

    // Voting through the API continues the book's numbers.
    let alice = app.sign_up("alice").await;
    let voted = app.vote(&alice, &id).await;
    assert_eq!(voted["data"]["vote"]["votes"], 3, "{voted}");
    assert_eq!(
        voted["data"]["vote"]["score"].as_f64().unwrap(),
        score + VOTE_SCORE
    );
    // The book's own vote still sees votegraph's voters.
    article_vote(&mut conn, "user:alice", &article).await;
    assert_eq!(conn.hget::<_, _, i64>(&article, "votes").await.unwrap(), 3);
}

#[tokio::test]
async fn what_the_api_writes_the_books_code_reads() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let first = app.post(&alice, "first", &["programming"]).await;
    let second = app.post(&alice, "second", &[]).await;
    app.vote(&bob, second["id"].as_str().unwrap()).await;

    let mut conn = app.redis.conn().await;
    let top = get_articles(&mut conn, 1, "score:").await;
    assert_eq!(top.len(), 2);
    assert_eq!(
        top[0]["id"],
        format!("article:{}", second["id"].as_str().unwrap())
    );
    assert_eq!(top[0]["title"], "second");
    assert_eq!(top[0]["votes"], "2");
    assert_eq!(top[0]["poster"], "user:alice");
    assert_eq!(top[0]["link"], "https://example.com/second");
    let time: f64 = top[1]["time"].parse().expect("time is a number of seconds");
    assert!((time - time_time()).abs() < 60.0);

    let newest = get_articles(&mut conn, 1, "time:").await;
    assert_eq!(newest[0]["title"], "second");

    let group = get_group_articles(&mut conn, "programming", 1).await;
    assert_eq!(group.len(), 1);
    assert_eq!(
        group[0]["id"],
        format!("article:{}", first["id"].as_str().unwrap())
    );

    // The book's vote on an API article counts like an API vote.
    let article = format!("article:{}", first["id"].as_str().unwrap());
    article_vote(&mut conn, "user:carol", &article).await;
    let data = app
        .gql_ok(
            "query($id: ID!) { article(id: $id) { votes } }",
            json!({ "id": first["id"] }),
            None,
        )
        .await;
    assert_eq!(data["article"]["votes"], 2);
}

#[tokio::test]
async fn a_book_article_upvoted_by_the_book_can_be_downvoted_and_switched() {
    let app = spawn_app().await;
    let bob = app.sign_up("bob").await;
    let mut conn = app.redis.conn().await;
    let id = post_article(
        &mut conn,
        "user:83271",
        "Book post",
        "http://www.google.com",
    )
    .await;
    let article = format!("article:{id}");
    article_vote(&mut conn, "user:bob", &article).await;
    let score: f64 = conn.zscore("score:", &article).await.unwrap();
    let q = "mutation($id: ID!, $d: VoteDirection!) { vote(articleId: $id, direction: $d) { votes downvotes score myVote } }";

    // bob's book upvote becomes a downvote: one SMOVE, -864.
    let data = app
        .gql_ok(q, json!({ "id": id, "d": "DOWN" }), Some(&bob))
        .await;
    assert_eq!(
        data["vote"],
        json!({ "votes": 1, "downvotes": 1, "score": score - 2.0 * VOTE_SCORE, "myVote": "DOWN" })
    );
    let data = app
        .gql_ok(q, json!({ "id": id, "d": "UP" }), Some(&bob))
        .await;
    assert_eq!(
        data["vote"],
        json!({ "votes": 2, "downvotes": 0, "score": score, "myVote": "UP" })
    );
    let data = app
        .gql_ok(q, json!({ "id": id, "d": "NONE" }), Some(&bob))
        .await;
    assert_eq!(
        data["vote"],
        json!({ "votes": 1, "downvotes": 0, "score": score - VOTE_SCORE, "myVote": "NONE" })
    );
    assert_eq!(conn.hget::<_, _, i64>(&article, "votes").await.unwrap(), 1);
    let voters: Vec<String> = conn.smembers(format!("voted:{id}")).await.unwrap();
    assert_eq!(voters, ["user:83271"]);
    // The book's poster gets karma from API votes on the book's article.
    let top = app
        .gql_ok("{ topPosters { user { name } karma } }", json!({}), None)
        .await;
    assert_eq!(top["topPosters"][0]["user"]["name"], "83271");
}
