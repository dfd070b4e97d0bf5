//! An article's groups: changing them (poster only), and reading one page
//! of a group's ranking (`lua/set_groups.lua`, `lua/group_page.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::{GROUP_LIST, GROUP_SIZES, RATE_LIMIT};
use super::{group_keys, or_outbox, via_outbox};
use super::{seconds, status, Call, Lua, ScoredMembers, ScriptReply, GROUP_KEYS};
use crate::domain::{ArticleId, GroupName, UserName};
use crate::domain::{Period, Ranking};
use crate::error::AppResult;
use crate::store::keys::{self, At};
use crate::store::shards::Gate;
use crate::store::Conn;

// --- set groups ---------------------------------------------------------

/// What the set-groups script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetGroupsReply {
    Limited(u64),
    Missing,
    /// The caller is not the article's poster.
    Forbidden,
    /// A moderator's change to a removed or hidden article.
    Out,
    /// The article would be in more than `GroupName::MAX_PER_ARTICLE`
    /// groups; nothing was written.
    TooManyGroups,
    Done,
}

impl ScriptReply for SetGroupsReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited(seconds(v)?)),
            ("missing", _) => Some(Self::Missing),
            ("forbidden", _) => Some(Self::Forbidden),
            ("out", _) => Some(Self::Out),
            ("too-many-groups", _) => Some(Self::TooManyGroups),
            ("ok", _) => Some(Self::Done),
            _ => None,
        }
    }
}

/// Adds and removes an article's groups (poster only). Cached group
/// rankings (`score:<group>`, `time:<group>`) that exist are updated in the
/// same step, so a group page shows the change at once.
static SET_GROUPS: LazyLock<Lua<SetGroupsReply>> = LazyLock::new(|| {
    Lua::write(
        "set-groups",
        &[
            RATE_LIMIT,
            GROUP_LIST,
            GROUP_SIZES,
            include_str!("../lua/set_groups.lua"),
        ],
    )
});

/// Runs the set-groups script; the caller may call it `limit` times per
/// window.
pub async fn set_groups(
    conn: &mut Conn,
    (at, id): (At, ArticleId),
    caller: &UserName,
    (add, remove): (&[GroupName], &[GroupName]),
    rate: Gate,
    moderates: bool,
) -> AppResult<SetGroupsReply> {
    let mut invocation = SET_GROUPS.invocation();
    invocation
        .key(rate.key)
        .key(at.key(keys::article(id)))
        .key(at.key(keys::article_groups(id)))
        .key(at.key(keys::SCORE))
        .key(at.key(keys::TIME))
        .key(at.key(keys::top(Period::All)))
        .key(at.key(or_outbox(at, keys::GROUPS_BY_SIZE)))
        .arg(keys::member(caller))
        .arg(add.len())
        .arg(rate.count)
        .arg(rate.window_secs)
        .arg(keys::USER_PREFIX)
        .arg(GroupName::MAX_PER_ARTICLE)
        .arg(GROUP_KEYS)
        .arg(if moderates { "1" } else { "" })
        .arg(via_outbox(at));
    for g in add.iter().chain(remove) {
        group_keys(&mut invocation, at, g);
        invocation.arg(g.as_str());
    }
    SET_GROUPS.call(&invocation, conn).await
}

// --- group page ---------------------------------------------------------

/// One page of a group's ranking.
///
/// A cached group ranking (`score:<group>`, kept current by the write
/// scripts) answers at once. Without one, a shallow page is found by walking
/// the global ranking from the top and keeping the group's members, which
/// costs about (stop + 1) × articles / group size membership checks: a few
/// dozen for a big group's first page. Only when that would pass the budget
/// is the ranking built with the book's `ZINTERSTORE` (weighted so the
/// ranking's scores pass through, negative net-vote scores included) and
/// cached 60 s, as in the book. Either way the order is the cached one's.
///
/// Every member comes with its score in the ranking read (score or post
/// time), so a score page needs no `ZSCORE` per article afterwards.
static GROUP_PAGE: LazyLock<Lua<ScoredMembers>> =
    LazyLock::new(|| Lua::new("group-page", &[include_str!("../lua/group_page.lua")]));

/// The group-page script's call for ranks `start..=stop`, spending at
/// most `budget` membership checks before building the cached ranking.
pub fn group_page(
    at: At,
    group: &GroupName,
    ranking: Ranking,
    (start, stop): (isize, isize),
    budget: u32,
) -> Call {
    let mut invocation = GROUP_PAGE.invocation();
    invocation
        .key(at.key(keys::group(group)))
        .key(at.key(keys::ranking_key(ranking)))
        .key(at.key(keys::group_ranking(group, ranking)))
        .arg(start)
        .arg(stop)
        .arg(budget)
        .arg(keys::GROUP_CACHE_SECS);
    GROUP_PAGE.pipelined(&invocation)
}
