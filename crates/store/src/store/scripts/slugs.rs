//! Renaming an article's slug, poster only, the old one freed in the same
//! step (`lua/rename_slug.lua`). New slugs are handed out by the post
//! script.

use std::sync::LazyLock;

use redis::Value;

use super::library::RATE_LIMIT;
use super::{seconds, status, via_outbox, Counted, Lua, ScriptReply};
use crate::domain::{ArticleId, Slug, UserName};
use crate::error::AppResult;
use crate::store::keys::{self, At};
use crate::store::shards::Gate;
use crate::store::{value_str, Conn};

/// What the rename-slug script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenameSlugReply {
    Limited(u64),
    Missing,
    Forbidden,
    /// Another article has the slug.
    Taken,
    /// With the old slug when the slug index is on other shards.
    Renamed(Option<String>),
}

impl ScriptReply for RenameSlugReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited(seconds(v)?)),
            ("missing", _) => Some(Self::Missing),
            ("forbidden", _) => Some(Self::Forbidden),
            ("taken", _) => Some(Self::Taken),
            ("ok", []) => Some(Self::Renamed(None)),
            ("ok", [old]) => Some(Self::Renamed(Some(value_str(old)?.to_owned()))),
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
    (at, id): (At, ArticleId),
    caller: &UserName,
    slug: &Slug,
    rate: Gate,
    moderates: bool,
) -> AppResult<RenameSlugReply> {
    let mut invocation = RENAME_SLUG.invocation();
    invocation
        .key(rate.key)
        .key(at.key(keys::article(id)))
        .key(at.key(keys::SLUGS))
        .arg(id.0)
        .arg(keys::member(caller))
        .arg(slug.as_str())
        .arg(rate.count)
        .arg(rate.window_secs)
        .arg(keys::USER_PREFIX)
        .arg(if moderates { "1" } else { "" })
        .arg(via_outbox(at));
    RENAME_SLUG.call(&invocation, conn).await
}

/// Frees `slug` in `index` (a placed slug index) unless another article
/// has it now.
static FREE_SLUG: LazyLock<Lua<Counted>> =
    LazyLock::new(|| Lua::write("free-slug", &[include_str!("../lua/free_slug.lua")]));

pub async fn free_slug(conn: &mut Conn, index: String, slug: &str, id: ArticleId) -> AppResult<()> {
    let mut invocation = FREE_SLUG.invocation();
    invocation.key(index).arg(slug).arg(id.0);
    FREE_SLUG.call(&invocation, conn).await.map(|_| ())
}
