//! Renaming an article's slug, poster only, the old one freed in the same
//! step (`lua/rename_slug.lua`). New slugs are handed out by the post
//! script.

use std::sync::LazyLock;

use redis::Value;

use super::library::RATE_LIMIT;
use super::{seconds, status, Lua, ScriptReply};
use crate::domain::{ArticleId, Slug, UserName};
use crate::error::AppResult;
use crate::rate::RateAction;
use crate::rate::RateLimit;
use crate::store::keys;
use crate::store::Conn;

/// What the rename-slug script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenameSlugReply {
    Limited {
        retry_after_secs: u64,
    },
    Missing,
    Forbidden,
    /// Another article has the slug.
    Taken,
    Renamed,
}

impl ScriptReply for RenameSlugReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited {
                retry_after_secs: seconds(v)?,
            }),
            ("missing", _) => Some(Self::Missing),
            ("forbidden", _) => Some(Self::Forbidden),
            ("taken", _) => Some(Self::Taken),
            ("ok", _) => Some(Self::Renamed),
            _ => None,
        }
    }
}

/// Gives an article a new slug (poster only), freeing the old one in the
/// same step.
static RENAME_SLUG: LazyLock<Lua<RenameSlugReply>> = LazyLock::new(|| {
    Lua::write(
        "rename-slug",
        &[RATE_LIMIT, include_str!("../lua/rename_slug.lua")],
    )
});

/// Runs the rename-slug script; the caller may rename `limit` times per
/// window.
pub async fn rename_slug(
    conn: &mut Conn,
    id: ArticleId,
    caller: &UserName,
    slug: &Slug,
    limit: RateLimit,
    moderates: bool,
) -> AppResult<RenameSlugReply> {
    let mut invocation = RENAME_SLUG.invocation();
    invocation
        .key(keys::user_rate(caller.as_str(), RateAction::RenameSlug))
        .key(keys::article(id))
        .key(keys::SLUGS)
        .arg(id.0)
        .arg(keys::member(caller))
        .arg(slug.as_str())
        .arg(limit.count())
        .arg(limit.window_secs())
        .arg(keys::USER_PREFIX)
        .arg(if moderates { "1" } else { "" });
    RENAME_SLUG.call(&invocation, conn).await
}
