//! The view script: a view counted once per viewer per window, a repeat
//! never refused, a missing article, the limit.

use super::*;
use crate::store::keys;

const WINDOW: u64 = 3600;

async fn view_as(c: &mut Conn, id: ArticleId, viewer: &str, limit: RateLimit) -> ViewReply {
    let rate = format!("{viewer}:rate:view");
    view(c, id, viewer.to_owned(), rate, limit, WINDOW, false)
        .await
        .expect("the view script runs")
}

async fn views(c: &mut Conn, id: ArticleId) -> Option<u64> {
    q(c, cmd("HGET").arg(keys::article(id)).arg("views")).await
}

#[tokio::test]
async fn a_view_is_counted_once_per_viewer_per_window() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &[]).await;
    assert_eq!(
        view_as(c, id, "user:bob", unlimited()).await,
        ViewReply::Counted
    );
    assert_eq!(views(c, id).await, Some(1));
    let ttl: i64 = q(c, cmd("TTL").arg(keys::article_viewers(id))).await;
    assert!(ttl > 0 && ttl <= WINDOW as i64, "{ttl}");

    assert_eq!(
        view_as(c, id, "user:bob", unlimited()).await,
        ViewReply::Repeated
    );
    assert_eq!(views(c, id).await, Some(1), "a repeat is not counted");
    assert_eq!(
        view_as(c, id, "client:10.0.0.1", unlimited()).await,
        ViewReply::Counted
    );
    assert_eq!(views(c, id).await, Some(2));
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
        ViewReply::Limited { retry_after_secs } => assert!((1..=60).contains(&retry_after_secs)),
        other => panic!("{other:?}"),
    }
    assert_eq!(views(c, second).await, None);
    let counted: u64 = q(c, cmd("GET").arg("user:bob:rate:view")).await;
    assert_eq!(counted, 2, "the repeat used none of the limit");
}

#[tokio::test]
async fn a_missing_article_is_not_viewed() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    assert_eq!(
        view_as(c, ArticleId(5), "user:bob", unlimited()).await,
        ViewReply::Missing
    );
    let written: bool = q(
        c,
        cmd("EXISTS")
            .arg(keys::article_viewers(ArticleId(5)))
            .arg("user:bob:rate:view"),
    )
    .await;
    assert!(!written);
}
