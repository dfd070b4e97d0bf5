//! The directory script: groups by size, then name, after a position.

use super::*;
use crate::store::keys::{self, At};
use crate::store::scripts::feeds::FeedReply;

/// The directory's page after `after`.
async fn page(c: &mut Conn, after: Option<(&str, &str)>, first: usize) -> FeedReply {
    let page = directory(c, At::SINGLE, after, first).await;
    page.expect("the directory script runs")
}

fn names(page: &FeedReply) -> Vec<(&str, f64)> {
    page.members.iter().map(|(m, v)| (m.as_str(), *v)).collect()
}

#[tokio::test]
async fn the_directory_pages_by_size_then_name() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    // Groups `big` (three articles), `a`, `b` and `c` (one each).
    posted(c, "alice", "one", &["big", "a"]).await;
    posted(c, "alice", "two", &["big", "b"]).await;
    posted(c, "alice", "three", &["big", "c"]).await;
    let first = page(c, None, 2).await;
    assert_eq!(first.total, 4);
    assert_eq!(names(&first), [("big", -3.0), ("a", -1.0), ("b", -1.0)]);
    let next = page(c, Some(("-1", "a")), 2).await;
    assert_eq!(names(&next), [("b", -1.0), ("c", -1.0)]);
    let after_big = page(c, Some(("-3", "big")), 10).await;
    assert_eq!(names(&after_big), [("a", -1.0), ("b", -1.0), ("c", -1.0)]);
    // After a group that left (or changed size): by its old place.
    let () = q(c, cmd("ZREM").arg(keys::GROUPS_BY_SIZE).arg("b")).await;
    let after_b = page(c, Some(("-1", "b")), 10).await;
    assert_eq!(names(&after_b), [("c", -1.0)]);
}
