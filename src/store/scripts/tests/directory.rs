//! The directory script (groups by size, then name, after a position) and
//! the recount that follows the group sets.

use super::*;
use crate::store::keys;
use crate::store::scripts::feeds::FeedReply;

fn names(reply: &FeedReply) -> Vec<(&str, f64)> {
    reply
        .members
        .iter()
        .map(|(m, v)| (m.as_str(), *v))
        .collect()
}

/// Groups `big` (three articles), `a`, `b` and `c` (one each).
async fn four_groups(c: &mut Conn) {
    posted(c, "alice", "one", &["big", "a"]).await;
    posted(c, "alice", "two", &["big", "b"]).await;
    posted(c, "alice", "three", &["big", "c"]).await;
}

#[tokio::test]
async fn the_directory_pages_by_size_then_name() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    four_groups(c).await;
    let first = directory(c, None, 2).await.unwrap();
    assert_eq!(first.total, 4);
    assert_eq!(names(&first), [("big", -3.0), ("a", -1.0), ("b", -1.0)]);
    let next = directory(c, Some(("-1", "a")), 2).await.unwrap();
    assert_eq!(names(&next), [("b", -1.0), ("c", -1.0)]);
    let after_big = directory(c, Some(("-3", "big")), 10).await.unwrap();
    assert_eq!(names(&after_big), [("a", -1.0), ("b", -1.0), ("c", -1.0)]);
    // After a group that left (or changed size): by its old place.
    let () = q(c, cmd("ZREM").arg(keys::GROUPS_BY_SIZE).arg("b")).await;
    let after_b = directory(c, Some(("-1", "b")), 10).await.unwrap();
    assert_eq!(names(&after_b), [("c", -1.0)]);
}

/// Group sets changed by the book's code are counted again; empty groups
/// leave the directory.
#[tokio::test]
async fn a_recount_follows_the_group_sets() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    four_groups(c).await;
    let () = q(c, cmd("SREM").arg("group:a").arg("article:1")).await;
    let () = q(c, cmd("SADD").arg("group:b").arg("article:9")).await;
    let () = q(c, cmd("ZADD").arg(keys::GROUPS_BY_SIZE).arg(-7).arg("c")).await;

    assert_eq!(recount_groups(c, 0, 2).await.unwrap(), 2);
    // Looked at four; `a`, now empty, left.
    assert_eq!(recount_groups(c, 0, 10).await.unwrap(), 4);
    let all = directory(c, None, 10).await.unwrap();
    assert_eq!(names(&all), [("big", -3.0), ("b", -2.0), ("c", -1.0)]);
    assert_eq!(recount_groups(c, 10, 10).await.unwrap(), 0);
}
