//! The net-vote rankings' scripts: pruning by period, resumed where it
//! stopped, and deriving them from the book's `score:` and `time:` (a
//! batch of the full pass; its batches over runs of one instant are tested
//! through the API, `book.rs`).

use super::*;
use crate::domain::VoteDirection;
use crate::store::keys::{self, At};

/// Where the pruning of the day stopped.
async fn mark(c: &mut Conn) -> Option<String> {
    q(c, cmd("HGET").arg(keys::TOP_PRUNED).arg("day")).await
}

#[tokio::test]
async fn pruning_removes_articles_too_old_for_the_period_and_resumes() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let day = keys::top(Period::Day);
    for (t, m) in [
        (1000, "article:1"),
        (2000, "article:2"),
        (3000, "article:3"),
    ] {
        let () = q(c, cmd("ZADD").arg(keys::TIME).arg(t).arg(m)).await;
        let () = q(c, cmd("ZADD").arg(&day).arg(t).arg(m)).await;
    }
    // One article a call, then where the period starts.
    for (pruned, at) in [(1, "1000"), (1, "2000"), (0, "2500")] {
        let n = prune_top(c, At::SINGLE, Period::Day, 2500, 1)
            .await
            .unwrap();
        assert_eq!(n, pruned);
        assert_eq!(mark(c).await.as_deref(), Some(at));
    }
    assert_eq!(zset(c, &day).await, [("article:3".to_owned(), 3000.0)]);
    // The other periods are untouched.
    let week: bool = q(c, cmd("EXISTS").arg(keys::top(Period::Week))).await;
    assert!(!week);
}

#[tokio::test]
async fn the_build_derives_net_votes_from_the_books_keys() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    posted(c, "alice", "one", &[]).await;
    posted(c, "alice", "two", &[]).await;
    vote_as(c, ArticleId(1), "bob", VoteDirection::Up).await;
    // An article of two days ago, written by the book's code: three
    // upvotes.
    let now = redis_now(c).await;
    let old = (now - 2.0 * 86_400.0).floor();
    let () = q(c, cmd("ZADD").arg(keys::TIME).arg(old).arg("article:3")).await;
    let score = old + 3.0 * keys::VOTE_SCORE;
    let () = q(c, cmd("ZADD").arg(keys::SCORE).arg(score).arg("article:3")).await;
    for period in Period::ALL {
        let () = q(c, cmd("DEL").arg(keys::top(period))).await;
    }

    let start = TopCursor {
        from: "-inf".to_owned(),
        skip: 0,
    };
    let reply = sweep_articles(c, &start, 10).await.unwrap();
    assert_eq!((reply.seen, reply.next), (3, None));
    let step = keys::TOP_STEP;
    for (m, net) in [("article:1", 2.0), ("article:2", 1.0)] {
        let t = zscore(c, keys::TIME, m).await.unwrap();
        for period in Period::ALL {
            assert_eq!(
                zscore(c, &keys::top(period), m).await,
                Some(net * step + t.floor()),
                "{m} {period:?}"
            );
        }
    }
    // Too old for the day.
    let old_value = Some(3.0 * step + old);
    for (period, value) in [
        (Period::Day, None),
        (Period::Week, old_value),
        (Period::All, old_value),
    ] {
        assert_eq!(
            zscore(c, &keys::top(period), "article:3").await,
            value,
            "{period:?}"
        );
    }
}
