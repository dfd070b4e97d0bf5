//! The net-vote rankings (`top:<period>`): pruning the articles that grew
//! too old for a period (`lua/prune_top.lua`), and the place in `time:`
//! the passes that derive them go on from (see `derive.rs`).

use std::sync::LazyLock;

use super::library::KARMA;
use super::{Counted, Lua};
use crate::domain::Period;
use crate::error::AppResult;
use crate::store::keys::{self, At};
use crate::store::Conn;

/// Removes from `top:<period>` up to `batch` articles posted at or before
/// `cutoff`, resuming where the last call stopped (`index:top:pruned`),
/// and from the period's cached rankings of their groups and posters.
static PRUNE_TOP: LazyLock<Lua<Counted>> =
    LazyLock::new(|| Lua::new("prune-top", &[KARMA, include_str!("../lua/prune_top.lua")]));

/// Answers how many articles left the period.
pub async fn prune_top(
    conn: &mut Conn,
    at: At,
    period: Period,
    cutoff: u64,
    batch: usize,
) -> AppResult<u64> {
    let mut invocation = PRUNE_TOP.invocation();
    invocation
        .key(at.key(keys::top(period)))
        .key(at.key(keys::TIME))
        .key(at.key(keys::TOP_PRUNED))
        .arg(cutoff)
        .arg(batch)
        .arg(period.name())
        .arg(keys::ARTICLE_GROUPS_SUFFIX)
        .arg(at.key(keys::GROUP_PREFIX))
        .arg(keys::GROUP_TOP_INFIX)
        .arg(keys::USER_PREFIX)
        .arg(keys::USER_TOP_INFIX)
        .arg(at.tag());
    Ok(PRUNE_TOP.call(&invocation, conn).await?.0)
}

/// A place in `time:`: from this post time (a `ZRANGEBYSCORE` bound),
/// past the first `skip` articles posted at it.
#[derive(Debug, Clone, PartialEq)]
pub struct TopCursor {
    pub from: String,
    pub skip: u64,
}

impl TopCursor {
    pub fn start() -> Self {
        Self {
            from: "-inf".to_owned(),
            skip: 0,
        }
    }
}
