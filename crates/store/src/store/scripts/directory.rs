//! The group directory: a page of the groups, largest first, after a
//! cursor's position (`lua/directory.lua`).

use std::sync::LazyLock;

use super::feeds::FeedReply;
use super::{Lua, MAX_TIES};
use crate::error::AppResult;
use crate::store::keys::{self, At};
use crate::store::Conn;

/// A page of the group directory after a position (minus the size, and
/// the name), as the feed script does for articles.
static DIRECTORY: LazyLock<Lua<FeedReply>> =
    LazyLock::new(|| Lua::new("directory", &[include_str!("../lua/directory.lua")]));

pub async fn directory(
    conn: &mut Conn,
    at: At,
    after: Option<(&str, &str)>,
    first: usize,
) -> AppResult<FeedReply> {
    let mut invocation = DIRECTORY.invocation();
    invocation
        .key(at.key(keys::GROUPS_BY_SIZE))
        .arg(first)
        .arg(MAX_TIES);
    if let Some((value, name)) = after {
        invocation.arg(value).arg(name);
    }
    DIRECTORY.call(&invocation, conn).await
}
