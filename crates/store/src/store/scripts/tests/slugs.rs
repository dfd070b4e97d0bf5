//! The rename-slug script's refusals (renames are tested through the API,
//! `slugs.rs`): poster only, a missing article, the limit.

use super::*;
use crate::store::keys::{self, At};

async fn rename(c: &mut Conn, id: ArticleId, caller: &str, new: &str) -> RenameSlugReply {
    rename_within(c, id, caller, new, unlimited()).await
}

/// Renames `id`'s slug as `caller`, counted against `limit`.
async fn rename_within(
    c: &mut Conn,
    id: ArticleId,
    caller: &str,
    new: &str,
    limit: RateLimit,
) -> RenameSlugReply {
    let rate = gate(rate_key(caller), limit);
    rename_slug(c, (At::SINGLE, id), &user(caller), &slug(new), rate, false)
        .await
        .expect("the rename-slug script runs")
}

fn rate_key(caller: &str) -> String {
    keys::user_rate(caller, crate::rate::RateAction::RenameSlug)
}

async fn owner(c: &mut Conn, slug: &str) -> Option<String> {
    q(c, cmd("HGET").arg(keys::SLUGS).arg(slug)).await
}

async fn slug_of(c: &mut Conn, id: ArticleId) -> String {
    q(c, cmd("HGET").arg(keys::article(id)).arg("slug")).await
}

#[tokio::test]
async fn only_the_poster_renames_and_within_the_limit() {
    let redis = TestRedis::start().await;
    let c = &mut redis.conn().await;
    let (id, _) = posted(c, "alice", "hello", &[]).await;
    assert_eq!(
        rename(c, id, "bob", "mine").await,
        RenameSlugReply::Forbidden
    );
    assert_eq!(owner(c, "mine").await, None);
    assert_eq!(
        rename(c, ArticleId(9), "alice", "mine").await,
        RenameSlugReply::Missing
    );

    // The calls above were counted too: the limit starts afresh.
    let () = q(c, cmd("DEL").arg(rate_key("alice"))).await;
    let once = limit(1, 60);
    let reply = rename_within(c, id, "alice", "first", once).await;
    assert_eq!(reply, RenameSlugReply::Renamed(None));
    match rename_within(c, id, "alice", "second", once).await {
        RenameSlugReply::Limited(secs) => assert!((1..=60).contains(&secs)),
        other => panic!("{other:?}"),
    }
    assert_eq!(slug_of(c, id).await, "first");
}
