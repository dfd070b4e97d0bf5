//! Compatibility with *Redis in Action*'s own code: the book's functions are
//! replayed here command for command (`post_article`, `article_vote`,
//! `add_remove_groups`, `get_articles`, `get_group_articles`).

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::{
    eventually, gql_at, now as time_time, spawn_app, spawn_server, test_settings,
    wait_for_first_pass, TestRedis, ARTICLE_FIELDS,
};

const ONE_WEEK_IN_SECONDS: i64 = 7 * 86_400;
const VOTE_SCORE: f64 = 432.0;

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
    // The book's poster gets karma from API votes on the book's article
    // (the book's post is derived within a second).
    eventually(
        "the book's poster in topPosters",
        Duration::from_secs(1),
        async || {
            let top = app
                .gql_ok("{ topPosters { user { name } karma } }", json!({}), None)
                .await;
            (top["topPosters"][0]["user"]["name"] == "83271")
                .then_some(())
                .ok_or(top)
        },
    )
    .await;
}

/// `myVote` of `user` on the articles `ids`, through the server at `address`.
async fn my_votes_at(address: &str, token: &str, ids: &[&str]) -> Vec<String> {
    let client = reqwest::Client::new();
    let query = ids
        .iter()
        .enumerate()
        .map(|(i, id)| format!("a{i}: article(id: \"{id}\") {{ myVote votes }}"))
        .collect::<Vec<_>>()
        .join(" ");
    let body = gql_at(
        &client,
        address,
        &format!("{{ {query} }}"),
        json!({}),
        Some(token),
        None,
    )
    .await;
    assert!(body.get("errors").is_none(), "{body}");
    (0..ids.len())
        .map(|i| {
            body["data"][format!("a{i}")]["myVote"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// Votes the book's code wrote (and votes of an older votegraph, which kept
/// no index) are in the voted sets only. The first start's full pass copies
/// them into the index; a book vote after it shows in `myVote` within a
/// second.
#[tokio::test]
async fn book_votes_show_in_my_vote_after_the_first_pass_and_later_ones_at_once() {
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    // Before votegraph first starts on this Redis: a book upvote by
    // alice, and a downvote an older votegraph wrote (no index).
    let before = post_article(&mut conn, "user:83271", "Before", "http://a.example").await;
    article_vote(&mut conn, "user:alice", &format!("article:{before}")).await;
    let down = post_article(&mut conn, "user:83271", "Downvoted", "http://b.example").await;
    let _: () = conn
        .sadd(format!("downvoted:{down}"), "user:alice")
        .await
        .unwrap();
    let _: () = conn
        .hincr(format!("article:{down}"), "downvotes", 1)
        .await
        .unwrap();
    let _: () = conn
        .zincr("score:", format!("article:{down}"), -VOTE_SCORE)
        .await
        .unwrap();

    let first = spawn_server(test_settings(&redis)).await;
    let client = reqwest::Client::new();
    let signed = gql_at(
        &client,
        &first.address,
        "mutation { signUp(name: \"alice\", password: \"password-of-alice\") { token } }",
        json!({}),
        None,
        None,
    )
    .await;
    let alice = signed["data"]["signUp"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for_first_pass(&client, &first.address).await;
    assert_eq!(
        my_votes_at(&first.address, &alice, &[&before, &down]).await,
        ["UP", "DOWN"]
    );

    // A book vote after the first pass: counted, and followed into the
    // index within a second (see book_writes.rs).
    let after = post_article(&mut conn, "user:83271", "After", "http://c.example").await;
    article_vote(&mut conn, "user:alice", &format!("article:{after}")).await;
    let data = gql_at(
        &client,
        &first.address,
        "query($id: ID!) { article(id: $id) { votes score myVote } }",
        json!({ "id": after }),
        Some(&alice),
        None,
    )
    .await;
    let score: f64 = conn
        .zscore("score:", format!("article:{after}"))
        .await
        .unwrap();
    assert_eq!(data["data"]["article"]["votes"], 2, "{data}");
    assert_eq!(data["data"]["article"]["score"].as_f64().unwrap(), score);
    eventually(
        "the book's vote in myVote",
        std::time::Duration::from_secs(1),
        async || {
            let seen = my_votes_at(&first.address, &alice, &[&after]).await;
            (seen == ["UP"]).then_some(()).ok_or(seen)
        },
    )
    .await;
}

/// The first pass indexes every open article's voters, across runs of
/// articles posted at the same instant, and leaves closed ones out.
#[tokio::test]
async fn the_first_pass_indexes_the_voting_windows_voters() {
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    let now = time_time();
    let mut pipe = redis::pipe();
    // 600 open articles in two runs sharing one post time each (520 and
    // 80), so whole batches and batch boundaries fall inside a run; 10
    // closed ones.
    for id in 1..=610u32 {
        let time = match id {
            1..=520 => now - 3.0 * 86_400.0,
            521..=600 => now - 86_400.0,
            _ => now - 8.0 * 86_400.0,
        };
        let article = format!("article:{id}");
        pipe.hset_multiple(&article, &[("title", "t"), ("poster", "user:83271")])
            .ignore()
            .hset(&article, "time", time)
            .ignore()
            .zadd("time:", &article, time)
            .ignore()
            .zadd("score:", &article, time + VOTE_SCORE)
            .ignore()
            .sadd(format!("voted:{id}"), format!("user:u{}", id % 7))
            .ignore();
        if id % 5 == 0 {
            pipe.sadd(format!("downvoted:{id}"), "user:critic").ignore();
        }
        // In both sets: an upvoter, as the vote script reads them.
        if id == 5 {
            pipe.sadd(format!("downvoted:{id}"), "user:both").ignore();
            pipe.sadd(format!("voted:{id}"), "user:both").ignore();
        }
        // Not a votegraph member: never indexed, as myVote never matched it.
        pipe.sadd(format!("voted:{id}"), "83271").ignore();
    }
    let () = pipe.query_async(&mut conn).await.unwrap();
    let server = spawn_server(test_settings(&redis)).await;
    wait_for_first_pass(&reqwest::Client::new(), &server.address).await;

    for u in 0..7u32 {
        let n: usize = conn.zcard(format!("user:u{u}:votes")).await.unwrap();
        let open = (1..=600u32).filter(|id| id % 7 == u).count();
        assert_eq!(n, open, "user:u{u}");
    }
    let critic: Vec<(String, f64)> = conn
        .zrange_withscores("user:critic:votes", 0, -1)
        .await
        .unwrap();
    assert_eq!(critic.len(), 120);
    assert!(critic.iter().all(|(_, score)| *score < 0.0));
    let closed: Option<f64> = conn.zscore("user:u1:votes", "article:603").await.unwrap();
    assert_eq!(closed, None, "closed articles are left out");
    let both: f64 = conn.zscore("user:both:votes", "article:5").await.unwrap();
    assert!(both > 0.0, "{both}");
    assert!(!conn.exists::<_, bool>("83271:votes").await.unwrap());
    let ttl: i64 = conn.ttl("user:u0:votes").await.unwrap();
    assert!(ttl > 0 && ttl <= ONE_WEEK_IN_SECONDS, "ttl {ttl}");
}
