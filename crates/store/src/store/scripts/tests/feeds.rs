//! The feed script: pages from a rank and after a position, a cursor whose
//! member moved or left, ties, a cached ranking built first, and the period
//! filter of net-vote rankings.

use super::*;
use crate::store::keys::{self, At};
use crate::store::scripts::feeds::FeedReply;

fn source(key: &str) -> FeedSource {
    FeedSource {
        key: key.to_owned(),
        build: None,
        min_time: 0,
        marker: None,
    }
}

fn names(reply: &FeedReply) -> Vec<&str> {
    reply.members.iter().map(|(m, _)| m.as_str()).collect()
}

/// A page of `source`, on one primary.
async fn read(c: &mut Conn, source: &FeedSource, start: Start<'_>, first: usize) -> FeedReply {
    run(c, feed(At::SINGLE, source, start, first)).await
}

async fn score_text(conn: &mut Conn, key: &str, member: &str) -> String {
    q(conn, cmd("ZSCORE").arg(key).arg(member)).await
}

#[tokio::test]
async fn pages_follow_a_rank_then_a_position() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    for stem in ["a", "b", "c", "d", "e"] {
        posted(c, "alice", stem, &[]).await;
    }
    let by_time = source(keys::TIME);
    let first = read(c, &by_time, Start::Rank(0), 2).await;
    assert_eq!(first.total, 5);
    assert_eq!(
        names(&first),
        ["article:5", "article:4", "article:3"],
        "one more than asked"
    );
    let value = score_text(c, keys::TIME, "article:4").await;
    assert_eq!(first.members[1].1, value.parse::<f64>().unwrap());

    let after = Start::After {
        value: &value,
        member: "article:4",
    };
    let next = read(c, &by_time, after, 2).await;
    assert_eq!(names(&next), ["article:3", "article:2", "article:1"]);
    let last = read(c, &by_time, Start::Rank(3), 2).await;
    assert_eq!(names(&last), ["article:2", "article:1"]);
}

#[tokio::test]
async fn a_cursor_keeps_its_place_when_its_member_moves_or_leaves() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    for stem in ["a", "b", "c", "d", "e"] {
        posted(c, "alice", stem, &[]).await;
    }
    let by_time = source(keys::TIME);
    let value = score_text(c, keys::TIME, "article:4").await;
    let () = q(c, cmd("ZADD").arg(keys::TIME).arg("+inf").arg("article:4")).await;
    let after = Start::After {
        value: &value,
        member: "article:4",
    };
    let page = read(c, &by_time, after, 10).await;
    assert_eq!(names(&page), ["article:3", "article:2", "article:1"]);

    let value = score_text(c, keys::TIME, "article:3").await;
    let () = q(c, cmd("ZREM").arg(keys::TIME).arg("article:3")).await;
    let after = Start::After {
        value: &value,
        member: "article:3",
    };
    let page = read(c, &by_time, after, 10).await;
    assert_eq!(names(&page), ["article:2", "article:1"]);

    // Members tied on the cursor's value run by member, descending: after
    // one that left, the page starts at the next one below it.
    let ties = "test:ties";
    let tied = [(100, "x:a"), (100, "x:b"), (100, "x:c"), (50, "x:z")];
    let () = q(c, cmd("ZADD").arg(ties).arg(&tied)).await;
    let () = q(c, cmd("ZREM").arg(ties).arg("x:b")).await;
    let after = Start::After {
        value: "100",
        member: "x:b",
    };
    let page = read(c, &source(ties), after, 10).await;
    assert_eq!(names(&page), ["x:a", "x:z"]);
}

#[tokio::test]
async fn a_missing_cached_ranking_is_built_first() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    posted(c, "alice", "a", &["g"]).await;
    posted(c, "alice", "b", &[]).await;
    posted(c, "alice", "c", &["g"]).await;
    let g = group("g");
    let cached = keys::group_ranking(&g, Ranking::Time);
    let built = FeedSource {
        key: cached.clone(),
        build: Some((keys::TIME.to_owned(), keys::group(&g))),
        min_time: 0,
        marker: None,
    };
    let page = read(c, &built, Start::Rank(0), 10).await;
    assert_eq!(page.total, 2);
    assert_eq!(names(&page), ["article:3", "article:1"]);
    let time: f64 = q(c, cmd("ZSCORE").arg(keys::TIME).arg("article:3")).await;
    assert_eq!(page.members[0].1, time, "the ranking's values pass through");
    let ttl: i64 = q(c, cmd("TTL").arg(&cached)).await;
    assert!(ttl > 0 && ttl <= keys::GROUP_CACHE_SECS as i64, "{ttl}");
}

/// Building a `TOP_*` ranking sets its owner's marker for as long (votes
/// test it); reading one already built leaves the marker as it is.
#[tokio::test]
async fn building_a_top_ranking_sets_its_owners_marker() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    posted(c, "alice", "a", &["g"]).await;
    let g = group("g");
    let marker = keys::group_cached(&g);
    let week = FeedSource {
        key: keys::group_top(&g, Period::Week),
        build: Some((keys::top(Period::Week), keys::group(&g))),
        min_time: 0,
        marker: Some(marker.clone()),
    };
    let page = read(c, &week, Start::Rank(0), 10).await;
    assert_eq!(names(&page), ["article:1"]);
    let ttl: i64 = q(c, cmd("TTL").arg(&marker)).await;
    assert!(ttl > 0 && ttl <= keys::GROUP_CACHE_SECS as i64, "{ttl}");
    let () = q(c, cmd("DEL").arg(&marker)).await;
    read(c, &week, Start::Rank(0), 10).await;
    let set: bool = q(c, cmd("EXISTS").arg(&marker)).await;
    assert!(!set, "a ranking already built sets nothing");
}

#[tokio::test]
async fn net_vote_pages_skip_articles_older_than_the_period() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let now = redis_now(c).await.floor();
    let old = now - 2.0 * 86_400.0;
    let day = keys::top(Period::Day);
    let step = keys::TOP_STEP;
    let scores = [(5.0 * step + old, "article:1"), (step + now, "article:2")];
    let () = q(c, cmd("ZADD").arg(&day).arg(&scores)).await;
    let recent = FeedSource {
        key: day.clone(),
        build: None,
        min_time: (now - 86_400.0) as u64,
        marker: None,
    };
    let page = read(c, &recent, Start::Rank(0), 10).await;
    assert_eq!(page.total, 2);
    assert_eq!(names(&page), ["article:2"]);
    let all = read(c, &source(&day), Start::Rank(0), 10).await;
    assert_eq!(names(&all), ["article:1", "article:2"]);
}
