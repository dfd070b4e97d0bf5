//! Feeds (`feed(order, first, after)` on Query, Group and User) and the
//! `TOP_*` orders: scrolling while votes reorder the feed, every `TOP_*`
//! order against a ranking computed straight from Redis, period
//! boundaries, votes written by the book's code, cursor errors.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncCommands;
use serde_json::{json, Value};

use crate::helpers::{
    done_if, error_code, eventually_every, gql_at, kill_pubsub_connections, now, spawn_app,
    spawn_app_on, spawn_app_tending, wait_for_top_index, TestApp, TestRedis, VOTE_AS,
};

const FEED: &str = "query($o: ArticleOrder!, $n: Int!, $a: String) {
  feed(order: $o, first: $n, after: $a) {
    totalCount
    pageInfo { hasNextPage endCursor }
    edges { cursor node { id votes downvotes } }
  }
}";

const DAY: f64 = 86_400.0;

/// The ids of a feed page, its end cursor and whether there is more.
fn page_of(feed: &Value) -> (Vec<String>, Option<String>, bool) {
    let ids = feed["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| e["node"]["id"].as_str().unwrap().to_owned())
        .collect();
    let end = feed["pageInfo"]["endCursor"].as_str().map(str::to_owned);
    let more = feed["pageInfo"]["hasNextPage"].as_bool().unwrap();
    (ids, end, more)
}

/// Scrolls the whole site feed in `order`, `first` at a time, calling
/// `between` after each page; answers the ids in the order seen.
async fn scroll<F, Fut>(app: &TestApp, order: &str, first: i64, mut between: F) -> Vec<String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..1000 {
        let data = app
            .gql_ok(FEED, json!({ "o": order, "n": first, "a": after }), None)
            .await;
        let (ids, end, more) = page_of(&data["feed"]);
        seen.extend(ids);
        if !more {
            return seen;
        }
        after = end;
        between().await;
    }
    panic!("the feed never ended");
}

async fn users(app: &TestApp, n: usize) -> Vec<String> {
    let mut tokens = Vec::new();
    for i in 0..n {
        tokens.push(app.sign_up(&format!("voter{i}")).await);
    }
    tokens
}

#[tokio::test]
async fn scrolling_a_feed_while_votes_reorder_it_repeats_and_skips_only_moved_articles() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    for i in 0..60 {
        app.post(&alice, &format!("article {i}"), &[]).await;
    }
    let voters = users(&app, 6).await;
    for order in ["SCORE", "TOP_ALL", "NEWEST"] {
        // Votes land between every two pages, and meanwhile from another
        // task, on articles already shown and articles still to come.
        let moved: Arc<Mutex<HashSet<String>>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let background = {
            let (moved, stop) = (moved.clone(), stop.clone());
            let (address, client, tokens) =
                (app.address.clone(), app.client.clone(), voters.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let id = (i * 37 % 60 + 1).to_string();
                    let direction = if i.is_multiple_of(3) { "DOWN" } else { "UP" };
                    moved.lock().unwrap().insert(id.clone());
                    gql_at(
                        &client,
                        &address,
                        VOTE_AS,
                        json!({ "id": id, "d": direction }),
                        Some(&tokens[(i % 6) as usize]),
                        None,
                    )
                    .await;
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            })
        };
        let mut step = 0u64;
        let seen = scroll(&app, order, 7, || {
            step += 1;
            let moved = moved.clone();
            let (app, voters) = (&app, &voters);
            async move {
                for k in 0..3 {
                    let id = ((step * 11 + k * 23) % 60 + 1).to_string();
                    moved.lock().unwrap().insert(id.clone());
                    app.vote_as(&voters[((step + k) % 6) as usize], &id, "UP")
                        .await;
                }
            }
        })
        .await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        background.await.unwrap();
        let moved = moved.lock().unwrap().clone();
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for id in &seen {
            *counts.entry(id).or_default() += 1;
        }
        for i in 1..=60 {
            let id = i.to_string();
            let n = counts.get(id.as_str()).copied().unwrap_or(0);
            if order == "NEWEST" || !moved.contains(&id) {
                // Votes never move an article in NEWEST.
                assert_eq!(
                    n, 1,
                    "{order}: unmoved article {id} seen {n} times: {seen:?}"
                );
            } else {
                assert!(n <= 2, "{order}: article {id} seen {n} times");
            }
        }
        assert!(
            moved.len() > 10,
            "{order}: only {} articles moved",
            moved.len()
        );
    }
}

/// Writes an article the way the book's `post_article` does, posted
/// `age` seconds ago with `net` net votes (its upvoters in `voted:<id>`).
async fn book_article(conn: &mut redis::aio::MultiplexedConnection, id: u64, age: f64, net: i64) {
    let time = now() - age;
    let article = format!("article:{id}");
    let _: () = redis::cmd("HSET")
        .arg(&article)
        .arg(&[
            ("title", format!("book {id}")),
            ("link", "http://example.com".into()),
            ("poster", "user:83271".into()),
        ])
        .arg("time")
        .arg(time)
        .arg("votes")
        .arg(net.max(1))
        .query_async(conn)
        .await
        .unwrap();
    let _: () = conn
        .zadd("score:", &article, time + 432.0 * net as f64)
        .await
        .unwrap();
    let _: () = conn.zadd("time:", &article, time).await.unwrap();
    let _: () = conn.set("article:", id).await.unwrap();
}

/// The `TOP_*` ranking of `period` (seconds; None: all) computed from the
/// book's keys alone: net votes = (score − time) / 432, newest first among
/// equals, then by member, descending.
async fn expected_top(
    conn: &mut redis::aio::MultiplexedConnection,
    period: Option<f64>,
) -> Vec<String> {
    let times: Vec<(String, f64)> = conn.zrange_withscores("time:", 0, -1).await.unwrap();
    let now = now();
    let mut rows = Vec::new();
    for (member, time) in times {
        if period.is_some_and(|p| now - time >= p) {
            continue;
        }
        let score: f64 = conn.zscore("score:", &member).await.unwrap();
        let net = ((score - time) / 432.0).round() as i64;
        rows.push((net, time.floor() as i64, member));
    }
    rows.sort_by(|a, b| b.cmp(a));
    rows.into_iter()
        .map(|(_, _, m)| m.trim_start_matches("article:").to_owned())
        .collect()
}

#[tokio::test]
async fn every_top_order_matches_a_ranking_computed_from_the_books_keys() {
    // Articles written by the book's code before votegraph first starts,
    // across every period boundary (just inside and just outside each).
    let redis = TestRedis::start().await;
    let mut conn = redis.conn().await;
    let ages_nets = [
        (0.5 * DAY, 3),
        (DAY - 120.0, 5),
        (DAY + 120.0, 9),
        (3.0 * DAY, -2),
        (7.0 * DAY - 120.0, 7),
        (7.0 * DAY + 120.0, 12),
        (29.0 * DAY, 1),
        (31.0 * DAY, 20),
        (300.0 * DAY, 4),
        (366.0 * DAY, 30),
        (2.0 * DAY, 5),
        (2.0 * DAY + 1.0, 5),
    ];
    for (i, (age, net)) in ages_nets.iter().enumerate() {
        book_article(&mut conn, i as u64 + 1, *age, *net).await;
    }
    let app = spawn_app_on(redis, |_| {}).await;
    wait_for_top_index(&mut conn).await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "fresh", &[]).await;

    for (order, period) in [
        ("TOP_DAY", Some(DAY)),
        ("TOP_WEEK", Some(7.0 * DAY)),
        ("TOP_MONTH", Some(30.0 * DAY)),
        ("TOP_YEAR", Some(365.0 * DAY)),
        ("TOP_ALL", None),
    ] {
        let want = expected_top(&mut conn, period).await;
        let data = app
            .gql_ok(FEED, json!({ "o": order, "n": 100, "a": null }), None)
            .await;
        let (ids, _, more) = page_of(&data["feed"]);
        assert_eq!(ids, want, "{order}");
        assert!(!more);
        assert_eq!(data["feed"]["totalCount"], want.len(), "{order}");
        let pages = app
            .gql_ok(
                "query($o: ArticleOrder!) { articles(order: $o, pageSize: 100) { id } }",
                json!({ "o": order }),
                None,
            )
            .await;
        assert_eq!(
            crate::helpers::ids(&pages["articles"]),
            want,
            "{order} as a page"
        );
    }
}

#[tokio::test]
async fn votes_show_in_top_orders_at_once_and_book_votes_within_a_sweep() {
    let redis = TestRedis::start().await;
    let app = spawn_app_tending(redis).await;
    let alice = app.sign_up("alice").await;
    for i in 0..3 {
        app.post(&alice, &format!("a{i}"), &["news"]).await;
    }
    let bob = app.sign_up("bob").await;
    let top = |order: &'static str| {
        let app = &app;
        async move {
            let data = app
                .gql_ok(FEED, json!({ "o": order, "n": 10, "a": null }), None)
                .await;
            page_of(&data["feed"]).0
        }
    };
    // Newest first among equal net votes.
    assert_eq!(top("TOP_DAY").await, ["3", "2", "1"]);
    // A vote through votegraph moves every period's ranking before its
    // mutation answers (the cached page is dropped too).
    app.vote_as(&bob, "1", "UP").await;
    for order in ["TOP_DAY", "TOP_WEEK", "TOP_MONTH", "TOP_YEAR", "TOP_ALL"] {
        assert_eq!(top(order).await, ["1", "3", "2"], "{order}");
    }
    let group = app
        .gql_ok(
            "{ group(name: \"news\") { feed(order: TOP_WEEK) { edges { node { id } } } articles(order: TOP_DAY) { id } } }",
            json!({}),
            None,
        )
        .await;
    let group_feed: Vec<&str> = group["group"]["feed"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(group_feed, ["1", "3", "2"]);
    assert_eq!(
        crate::helpers::ids(&group["group"]["articles"]),
        ["1", "3", "2"]
    );

    // The book's code votes article 2 up twice (it only knows upvotes):
    // the upkeep's sweep of the open window brings it to the top.
    let mut conn = app.redis.conn().await;
    for voter in ["user:1", "user:2"] {
        let _: () = conn.sadd("voted:2", voter).await.unwrap();
        let _: () = conn.zincr("score:", "article:2", 432).await.unwrap();
        let _: () = conn.hincr("article:2", "votes", 1).await.unwrap();
    }
    eventually_every(
        "the book's votes to reach TOP_WEEK",
        Duration::from_secs(5),
        Duration::from_millis(50),
        async || {
            let week = top("TOP_WEEK").await;
            done_if(week == ["2", "1", "3"], week)
        },
    )
    .await;
}

#[tokio::test]
async fn an_article_leaves_a_periods_ranking_when_it_grows_too_old() {
    let redis = TestRedis::start().await;
    let app = spawn_app_tending(redis).await;
    let alice = app.sign_up("alice").await;
    app.post(&alice, "young", &[]).await;
    app.post(&alice, "ageing", &[]).await;
    // Article 2 was posted 8 days ago, as if that much time had passed
    // since it was indexed: its post time moves back in the book's keys,
    // and the pruning marks go back 10 days, as they would have stood.
    // It is past the voting window, so only the pruning takes it out.
    let mut conn = app.redis.conn().await;
    let time: f64 = conn.zscore("time:", "article:2").await.unwrap();
    let older = time - 8.0 * DAY - 60.0;
    let _: () = conn.zadd("time:", "article:2", older).await.unwrap();
    let _: () = conn
        .zadd("score:", "article:2", older + 432.0)
        .await
        .unwrap();
    let _: () = conn.hset("article:2", "time", older).await.unwrap();
    for period in ["day", "week"] {
        let _: () = conn
            .hset("index:top:pruned", period, (time - 10.0 * DAY) as u64)
            .await
            .unwrap();
    }
    // No notification names members edited by hand; the full pass that
    // follows a reconnection of the listener does.
    assert!(kill_pubsub_connections(&mut conn).await >= 1);
    // The prune and the pass run in either order: wait for both (the pass
    // files article 2 at its older time).
    let month_value = top_value(1.0, older);
    eventually_every(
        "article 2 to be pruned and re-derived",
        Duration::from_secs(5),
        Duration::from_millis(50),
        async || {
            let day: Vec<String> = conn.zrange("top:day", 0, -1).await.unwrap();
            let week: Vec<String> = conn.zrange("top:week", 0, -1).await.unwrap();
            let month: Option<f64> = conn.zscore("top:month", "article:2").await.unwrap();
            done_if(
                day == ["article:1"] && week == ["article:1"] && month == Some(month_value),
                (day, week, month),
            )
        },
    )
    .await;
    // In the month both have one net vote; article 2, older in the book's
    // keys (the sweep re-derives its post time too), comes second.
    for (order, want) in [
        ("TOP_DAY", vec!["1"]),
        ("TOP_WEEK", vec!["1"]),
        ("TOP_MONTH", vec!["1", "2"]),
    ] {
        let data = app
            .gql_ok(FEED, json!({ "o": order, "n": 10, "a": null }), None)
            .await;
        assert_eq!(page_of(&data["feed"]).0, want, "{order}");
    }
}

#[tokio::test]
async fn user_feeds_and_group_feeds_page_with_their_own_cursors() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    for i in 0..5 {
        app.post(&alice, &format!("alice {i}"), &["rust"]).await;
        app.post(&bob, &format!("bob {i}"), &[]).await;
    }
    let query = "query($a: String) { me { feed(order: NEWEST, first: 2, after: $a) {
        totalCount pageInfo { hasNextPage endCursor } edges { node { id poster { name } } } } } }";
    let mut after: Option<String> = None;
    let mut seen = Vec::new();
    loop {
        let data = app.gql_ok(query, json!({ "a": after }), Some(&alice)).await;
        let feed = &data["me"]["feed"];
        assert_eq!(feed["totalCount"], 5);
        for e in feed["edges"].as_array().unwrap() {
            assert_eq!(e["node"]["poster"]["name"], "alice");
        }
        let (ids, end, more) = page_of(feed);
        seen.extend(ids);
        if !more {
            break;
        }
        after = end;
    }
    assert_eq!(seen, ["9", "7", "5", "3", "1"]);
    // A cursor of alice's feed is refused by the site's and a group's.
    let first = app.gql_ok(query, json!({ "a": null }), Some(&alice)).await;
    let cursor = first["me"]["feed"]["pageInfo"]["endCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let site = app
        .gql(FEED, json!({ "o": "NEWEST", "n": 2, "a": cursor }), None)
        .await;
    assert_eq!(error_code(&site), "BAD_USER_INPUT");
    let group = app
        .gql(
            "query($a: String) { group(name: \"rust\") { feed(order: NEWEST, after: $a) { totalCount } } }",
            json!({ "a": cursor }),
            None,
        )
        .await;
    assert_eq!(error_code(&group), "BAD_USER_INPUT");
    let group = app
        .gql_ok(
            "{ group(name: \"rust\") { feed(order: SCORE, first: 3) { totalCount pageInfo { hasNextPage endCursor } edges { node { id } } } } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(group["group"]["feed"]["totalCount"], 5);
    assert_eq!(page_of(&group["group"]["feed"]).0.len(), 3);
}

/// A user's articles by score come from a cache: built by the read that
/// needs it, for a minute, with its owner's marker; votes move it while it
/// lives and leave it missing otherwise; one kept without a lifetime (as an
/// earlier version kept it) is built anew.
#[tokio::test]
async fn a_users_score_ranking_is_a_cache_that_votes_keep_current() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    let bob = app.sign_up("bob").await;
    for i in 0..3 {
        app.post(&alice, &format!("alice {i}"), &[]).await;
    }
    let mut conn = app.redis.conn().await;
    let ranking = "user:alice:articles:score";
    let marker = "user:alice:cached";
    let exists = async |conn: &mut redis::aio::MultiplexedConnection, key: &str| -> bool {
        conn.exists(key).await.unwrap()
    };
    assert!(!exists(&mut conn, ranking).await, "posts do not build it");
    let query = "{ me { articles { id score } feed(first: 2) { pageInfo { hasNextPage endCursor } edges { node { id } } } } }";
    let read = async || {
        let me = app.gql_ok(query, json!({}), Some(&alice)).await["me"].clone();
        let ids: Vec<String> = me["articles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap().to_owned())
            .collect();
        let (feed, _, _) = page_of(&me["feed"]);
        assert_eq!(feed, ids[..2], "the feed ranks as the page does");
        ids
    };
    // Equal votes: newest first.
    assert_eq!(read().await, ["3", "2", "1"]);
    let ttl: i64 = conn.ttl(ranking).await.unwrap();
    assert!((1..=60).contains(&ttl), "{ttl}");
    let marker_ttl: i64 = conn.ttl(marker).await.unwrap();
    assert!(marker_ttl >= ttl, "{marker_ttl} {ttl}");

    // A vote moves the cached ranking in place.
    app.vote(&bob, "1").await;
    let score: f64 = conn.zscore("score:", "article:1").await.unwrap();
    let cached: Option<f64> = conn.zscore(ranking, "article:1").await.unwrap();
    assert_eq!(cached, Some(score));
    assert_eq!(read().await, ["1", "3", "2"]);

    // Gone (as after its minute), votes leave it missing; the next read
    // builds it with them.
    let () = conn.del(&[ranking, marker]).await.unwrap();
    app.vote(&bob, "2").await;
    assert!(
        !exists(&mut conn, ranking).await,
        "a vote does not build it"
    );
    assert_eq!(read().await, ["2", "1", "3"]);

    // Kept without a lifetime and out of date: built anew by the read.
    let () = conn.del(&[ranking, marker]).await.unwrap();
    let () = conn
        .zadd_multiple(
            ranking,
            &[(3.0, "article:2"), (2.0, "article:1"), (1.0, "article:3")],
        )
        .await
        .unwrap();
    app.vote(&bob, "3").await;
    assert_eq!(read().await, ["3", "2", "1"]);
    let ttl: i64 = conn.ttl(ranking).await.unwrap();
    assert!((1..=60).contains(&ttl), "{ttl}");
}

#[tokio::test]
async fn bad_cursors_and_sizes_are_bad_user_input() {
    let app = spawn_app().await;
    let alice = app.sign_up("alice").await;
    for i in 0..3 {
        app.post(&alice, &format!("a{i}"), &[]).await;
    }
    let data = app
        .gql_ok(FEED, json!({ "o": "SCORE", "n": 1, "a": null }), None)
        .await;
    let cursor = data["feed"]["pageInfo"]["endCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    for (order, first, after, words) in [
        ("SCORE", 1, "not-a-cursor", "malformed"),
        ("SCORE", 1, "00ff", "malformed"),
        ("NEWEST", 1, cursor.as_str(), "another order"),
        ("TOP_WEEK", 1, cursor.as_str(), "another order"),
        (
            "SCORE",
            0,
            cursor.as_str(),
            "first must be between 1 and 100",
        ),
        (
            "SCORE",
            101,
            cursor.as_str(),
            "first must be between 1 and 100",
        ),
    ] {
        let body = app
            .gql(FEED, json!({ "o": order, "n": first, "a": after }), None)
            .await;
        assert_eq!(error_code(&body), "BAD_USER_INPUT", "{body}");
        let message = body["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains(words), "{message}");
    }
    // The cursor itself works, and an empty feed has no end cursor.
    let next = app
        .gql_ok(FEED, json!({ "o": "SCORE", "n": 5, "a": cursor }), None)
        .await;
    assert_eq!(page_of(&next["feed"]).0.len(), 2);
    let empty = app
        .gql_ok(
            "{ group(name: \"nobody\") { feed { totalCount pageInfo { hasNextPage endCursor } edges { cursor } } } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(
        empty["group"]["feed"],
        json!({ "totalCount": 0, "pageInfo": { "hasNextPage": false, "endCursor": null }, "edges": [] })
    );
    // And a feed too large for the cost limit is refused before it runs.
    let body = app
        .gql(
            "{ feed(first: 100) { edges { node { poster { feed(first: 100) { edges { node { id } } } } } } } }",
            json!({}),
            None,
        )
        .await;
    assert_eq!(error_code(&body), "QUERY_TOO_COMPLEX", "{body}");
}

/// A `top:<period>` value: net votes × 2^32 + the whole post second.
fn top_value(net: f64, posted: f64) -> f64 {
    net * 4_294_967_296.0 + posted.floor()
}
