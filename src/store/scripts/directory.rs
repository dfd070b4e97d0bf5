//! The group directory: a page of the groups, largest first, after a
//! cursor's position, and the upkeep that recounts their sizes
//! (`lua/directory.lua`, `lua/recount_groups.lua`).

use std::sync::LazyLock;

use super::feeds::FeedReply;
use super::{Counted, Lua, MAX_TIES};
use crate::error::AppResult;
use crate::store::keys;
use crate::store::Conn;

/// A page of the group directory after a position (minus the size, and
/// the name), as the feed script does for articles.
static DIRECTORY: LazyLock<Lua<FeedReply>> =
    LazyLock::new(|| Lua::new("directory", &[include_str!("../lua/directory.lua")]));

/// Runs the directory script: `first + 1` groups at most.
pub async fn directory(
    conn: &mut Conn,
    after: Option<(&str, &str)>,
    first: usize,
) -> AppResult<FeedReply> {
    let mut invocation = DIRECTORY.invocation();
    invocation
        .key(keys::GROUPS_BY_SIZE)
        .arg(first)
        .arg(MAX_TIES);
    if let Some((value, name)) = after {
        invocation.arg(value).arg(name);
    }
    DIRECTORY.call(&invocation, conn).await
}

/// Sets the directory's counts of `batch` groups from rank `start` on to
/// their `group:<name>` sets' sizes (dropping empty ones); answers how many
/// it looked at. With [`index_groups`](crate::store::Store::index_groups),
/// how the book's group changes are counted.
static RECOUNT_GROUPS: LazyLock<Lua<Counted>> = LazyLock::new(|| {
    Lua::new(
        "recount-groups",
        &[include_str!("../lua/recount_groups.lua")],
    )
});

pub async fn recount_groups(conn: &mut Conn, start: usize, batch: usize) -> AppResult<u64> {
    let mut invocation = RECOUNT_GROUPS.invocation();
    invocation
        .key(keys::GROUPS_BY_SIZE)
        .arg(start)
        .arg(batch)
        .arg(keys::GROUP_PREFIX);
    Ok(RECOUNT_GROUPS.call(&invocation, conn).await?.0)
}
