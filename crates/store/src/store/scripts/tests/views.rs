//! The view script's limit, which a repeat never uses (views are tested
//! through the API, `rate_limits.rs`).

use super::*;
use crate::store::keys::{self, At};

const WINDOW: u64 = 3600;

async fn view_as(c: &mut Conn, id: ArticleId, viewer: &str, limit: RateLimit) -> ViewReply {
    let rate = format!("{viewer}:rate:view");
    view(
        c,
        (At::SINGLE, id),
        viewer.to_owned(),
        gate(rate, limit),
        WINDOW,
        false,
    )
    .await
    .expect("the view script runs")
}

async fn views(c: &mut Conn, id: ArticleId) -> Option<u64> {
    q(c, cmd("HGET").arg(keys::article(id)).arg("views")).await
}

#[tokio::test]
async fn a_repeat_is_never_refused_but_new_views_are_limited() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (first, _) = posted(c, "alice", "one", &[]).await;
    let (second, _) = posted(c, "alice", "two", &[]).await;
    let once = limit(1, 60);
    assert_eq!(
        view_as(c, first, "user:bob", once).await,
        ViewReply::Counted
    );
    assert_eq!(
        view_as(c, first, "user:bob", once).await,
        ViewReply::Repeated
    );
    match view_as(c, second, "user:bob", once).await {
        ViewReply::Limited(retry_after_secs) => assert!((1..=60).contains(&retry_after_secs)),
        other => panic!("{other:?}"),
    }
    assert_eq!(views(c, second).await, None);
    let counted: u64 = q(c, cmd("GET").arg("user:bob:rate:view")).await;
    assert_eq!(counted, 2, "the repeat used none of the limit");
}
