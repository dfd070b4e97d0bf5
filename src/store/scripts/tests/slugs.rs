//! The rename-slug script's refusals (renames are tested through the API,
//! `slugs.rs`): poster only, a missing article, the limit.

use super::*;
use crate::store::keys::{self, At};

async fn rename(c: &mut Conn, id: ArticleId, caller: &str, new: &str) -> RenameSlugReply {
    let rate = gate(rate_key(caller), unlimited());
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
    let () = q(
        c,
        cmd("DEL").arg(keys::user_rate(
            "alice",
            crate::rate::RateAction::RenameSlug,
        )),
    )
    .await;
    let once = limit(1, 60);
    let alice = user("alice");
    let rate = || gate(rate_key("alice"), once);
    let reply = rename_slug(c, (At::SINGLE, id), &alice, &slug("first"), rate(), false)
        .await
        .unwrap();
    assert_eq!(reply, RenameSlugReply::Renamed(None));
    match rename_slug(c, (At::SINGLE, id), &alice, &slug("second"), rate(), false)
        .await
        .unwrap()
    {
        RenameSlugReply::Limited { retry_after_secs } => {
            assert!((1..=60).contains(&retry_after_secs))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(slug_of(c, id).await, "first");
}
