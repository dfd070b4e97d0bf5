//! The vote-index backfill script: the book's voted sets copied into the
//! voters' indexes, the voting window's bound, and a pass in batches.

use super::*;
use crate::store::keys;
use crate::store::scripts::backfill::BackfillBatch;

async fn zscore(conn: &mut Conn, key: &str, member: &str) -> Option<f64> {
    q(conn, cmd("ZSCORE").arg(key).arg(member)).await
}

/// An article posted at `t` as the book writes one: `time:` and the voted
/// sets only.
async fn book_article(c: &mut Conn, id: u64, t: f64, up: &[&str], down: &[&str]) {
    let () = q(
        c,
        cmd("ZADD")
            .arg(keys::TIME)
            .arg(t)
            .arg(keys::article(ArticleId(id))),
    )
    .await;
    if !up.is_empty() {
        let () = q(c, cmd("SADD").arg(keys::voted(ArticleId(id))).arg(up)).await;
    }
    if !down.is_empty() {
        let () = q(c, cmd("SADD").arg(keys::downvoted(ArticleId(id))).arg(down)).await;
    }
}

#[tokio::test]
async fn the_voted_sets_of_the_window_are_copied_into_the_indexes() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let t = redis_now(c).await.floor() - 100.0;
    // dave is in both sets: he ends as an upvoter, as the vote script
    // reads him; a member without the user prefix is not indexed.
    book_article(
        c,
        1,
        t,
        &["user:bob", "user:dave", "someone"],
        &["user:carol", "user:dave"],
    )
    .await;
    let closed = t - keys::VOTING_WINDOW_SECS as f64;
    book_article(c, 2, closed, &["user:bob"], &[]).await;

    let batch = backfill_votes(c, None, 10, 1000).await.unwrap();
    assert_eq!(
        batch,
        BackfillBatch {
            articles: 1,
            entries: 4,
            next: None
        }
    );
    assert_eq!(
        zscore(c, &keys::user_votes("bob"), "article:1").await,
        Some(t)
    );
    assert_eq!(
        zscore(c, &keys::user_votes("carol"), "article:1").await,
        Some(-t)
    );
    assert_eq!(
        zscore(c, &keys::user_votes("dave"), "article:1").await,
        Some(t)
    );
    assert_eq!(
        zscore(c, &keys::user_votes("bob"), "article:2").await,
        None,
        "voting closed"
    );
    let ttl: i64 = q(c, cmd("TTL").arg(keys::user_votes("bob"))).await;
    assert!(ttl > keys::VOTING_WINDOW_SECS as i64 - 5, "{ttl}");
    let stray: bool = q(c, cmd("EXISTS").arg("someone:votes")).await;
    assert!(!stray);
}

/// A pass is a series of bounded batches, each resuming at its cursor,
/// past the articles of one instant already done.
#[tokio::test]
async fn a_pass_goes_on_from_its_cursor() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let t = redis_now(c).await.floor() - 100.0;
    book_article(c, 1, t, &["user:u1"], &[]).await;
    book_article(c, 2, t, &["user:u2"], &[]).await;
    book_article(c, 3, t + 1.0, &["user:u3"], &[]).await;
    book_article(c, 4, t + 2.0, &["user:u4"], &[]).await;

    let mut cursor = None;
    let (mut articles, mut calls) = (0, 0);
    loop {
        let batch = backfill_votes(c, cursor.as_ref(), 1, 1000).await.unwrap();
        articles += batch.articles;
        calls += 1;
        assert!(calls <= 10, "the pass ends");
        match batch.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(articles, 4);
    for (user, id) in [("u1", 1), ("u2", 2), ("u3", 3), ("u4", 4)] {
        let indexed = zscore(c, &keys::user_votes(user), &keys::article(ArticleId(id))).await;
        assert!(indexed.is_some(), "{user}");
    }

    // The voters' budget ends a batch after a whole article.
    let () = q(c, &cmd("FLUSHALL")).await;
    book_article(c, 1, t, &["user:u1", "user:u2"], &[]).await;
    book_article(c, 2, t + 1.0, &["user:u3"], &[]).await;
    let batch = backfill_votes(c, None, 10, 1).await.unwrap();
    assert_eq!((batch.articles, batch.entries), (1, 2));
    assert!(batch.next.is_some());
}
