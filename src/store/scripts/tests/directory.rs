//! The directory script: groups by size, then name, after a position.

use super::*;
use crate::store::keys::{self, At};
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
    let first = directory(c, At::SINGLE, None, 2).await.unwrap();
    assert_eq!(first.total, 4);
    assert_eq!(names(&first), [("big", -3.0), ("a", -1.0), ("b", -1.0)]);
    let next = directory(c, At::SINGLE, Some(("-1", "a")), 2)
        .await
        .unwrap();
    assert_eq!(names(&next), [("b", -1.0), ("c", -1.0)]);
    let after_big = directory(c, At::SINGLE, Some(("-3", "big")), 10)
        .await
        .unwrap();
    assert_eq!(names(&after_big), [("a", -1.0), ("b", -1.0), ("c", -1.0)]);
    // After a group that left (or changed size): by its old place.
    let () = q(c, cmd("ZREM").arg(keys::GROUPS_BY_SIZE).arg("b")).await;
    let after_b = directory(c, At::SINGLE, Some(("-1", "b")), 10)
        .await
        .unwrap();
    assert_eq!(names(&after_b), [("c", -1.0)]);
}
