//! `Article.myVote` from the caller's vote index (`user:<name>:votes`): it
//! follows every vote, forgets closed articles, and costs one command per
//! page.

use std::collections::HashMap;

use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::{now, spawn_app, TestApp, VOTE_AS};

const WEEK: f64 = 7.0 * 86_400.0;

/// The caller's `myVote` on each article of the newest page, by id.
async fn my_votes(app: &TestApp, token: &str) -> HashMap<String, String> {
    let data = app
        .gql_ok(
            "{ articles(order: NEWEST, pageSize: 25) { id myVote } }",
            json!({}),
            Some(token),
        )
        .await;
    data["articles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().to_owned(),
                a["myVote"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A user's vote index, member → score.
async fn index(conn: &mut redis::aio::MultiplexedConnection, user: &str) -> HashMap<String, f64> {
    let pairs: Vec<(String, f64)> = conn
        .zrange_withscores(format!("user:{user}:votes"), 0, -1)
        .await
        .unwrap();
    pairs.into_iter().collect()
}

#[tokio::test]
async fn my_vote_on_a_page_follows_every_switch_of_two_users() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let carol = app.sign_up("carol").await;
    let mut posted = HashMap::new();
    let mut ids = Vec::new();
    for title in ["a", "b", "c"] {
        let article = app.post(&alice, title, &[]).await;
        let id = article["id"].as_str().unwrap().to_owned();
        // The index files an article under its post time rounded up to the
        // second (a whole number, which small sorted sets keep cheaply).
        let time = article["score"].as_f64().unwrap() - 432.0;
        posted.insert(id.clone(), time.ceil());
        ids.push(id);
    }
    let (a, b, c) = (ids[0].as_str(), ids[1].as_str(), ids[2].as_str());
    let users = [("bob", &bob), ("carol", &carol)];
    let mut expected: HashMap<(&str, &str), &str> = HashMap::new();
    let steps = [
        ("bob", a, "UP"),
        ("carol", a, "DOWN"),
        ("bob", b, "DOWN"),
        ("bob", a, "DOWN"),
        ("carol", a, "UP"),
        ("bob", b, "NONE"),
        ("carol", c, "UP"),
        ("carol", c, "NONE"),
        ("bob", a, "UP"),
        ("carol", b, "DOWN"),
        ("carol", b, "DOWN"),
    ];
    for (i, (user, id, direction)) in steps.into_iter().enumerate() {
        let token = if user == "bob" { &bob } else { &carol };
        let body = app
            .gql(VOTE_AS, json!({ "id": id, "d": direction }), Some(token))
            .await;
        assert!(body.get("errors").is_none(), "step {i}: {body}");
        expected.insert((user, id), direction);
        for (name, token) in users {
            let mine = my_votes(&app, token).await;
            for id in [a, b, c] {
                let want = expected.get(&(name, id)).copied().unwrap_or("NONE");
                assert_eq!(mine[id], want, "step {i}: {name}'s vote on {id}");
            }
        }
    }
    // The poster's own upvote is indexed when posting.
    let theirs = my_votes(&app, &alice).await;
    assert!([a, b, c].iter().all(|id| theirs[*id] == "UP"), "{theirs:?}");

    // The index holds the post time (to the second above), signed; a
    // retracted vote is gone.
    let mut conn = app.redis.conn().await;
    let member = |id: &str| format!("article:{id}");
    assert_eq!(
        index(&mut conn, "bob").await,
        HashMap::from([(member(a), posted[a])])
    );
    assert_eq!(
        index(&mut conn, "carol").await,
        HashMap::from([(member(a), posted[a]), (member(b), -posted[b])])
    );
    assert_eq!(index(&mut conn, "alice").await.len(), 3);
}

#[tokio::test]
async fn closed_articles_leave_the_vote_index_at_the_voters_next_vote() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    let open = app.post(&alice, "open", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let fresh = app.post(&alice, "fresh", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.vote_as(&bob, &open, "UP").await;

    // Articles written with the book's keys: two posted 8 days ago, two
    // an hour before their window closes. bob's index lists them from when
    // he voted on them (an upvote and a downvote each).
    let mut conn = app.redis.conn().await;
    let old = now() - 8.0 * 86_400.0;
    let closing = now() - WEEK + 3_600.0;
    let written = [
        (100, old, 1.0),
        (101, old, -1.0),
        (102, closing, 1.0),
        (103, closing, -1.0),
    ];
    for (id, time, sign) in written {
        let article = format!("article:{id}");
        let _: () = redis::cmd("HSET")
            .arg(&article)
            .arg(&[
                ("title", "book"),
                ("link", "http://example.com"),
                ("poster", "user:83271"),
            ])
            .arg("time")
            .arg(time)
            .arg("votes")
            .arg(1)
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = conn.zadd("score:", &article, time + 432.0).await.unwrap();
        let _: () = conn.zadd("time:", &article, time).await.unwrap();
        let _: () = conn
            .zadd("user:bob:votes", &article, sign * time)
            .await
            .unwrap();
    }
    // An article whose voting closed reads NONE, whatever the index says.
    let closed = app
        .gql_ok(
            "{ a: article(id: \"100\") { myVote } b: article(id: \"101\") { myVote } c: article(id: \"102\") { myVote } d: article(id: \"103\") { myVote } }",
            json!({}),
            Some(&bob),
        )
        .await;
    assert_eq!(
        closed,
        json!({ "a": { "myVote": "NONE" }, "b": { "myVote": "NONE" }, "c": { "myVote": "UP" }, "d": { "myVote": "DOWN" } })
    );

    // bob's next vote drops the closed ones, and only them.
    app.vote_as(&bob, &fresh, "UP").await;
    let mut members: Vec<String> = index(&mut conn, "bob").await.into_keys().collect();
    members.sort();
    let mut want = vec![
        format!("article:{open}"),
        format!("article:{fresh}"),
        "article:102".to_owned(),
        "article:103".to_owned(),
    ];
    want.sort();
    assert_eq!(members, want);
    // And the index lives a week past that vote, when every article in it
    // has closed.
    let ttl: i64 = conn.ttl("user:bob:votes").await.unwrap();
    let most = WEEK as i64;
    assert!((most - 30..=most).contains(&ttl), "ttl {ttl}");
}
