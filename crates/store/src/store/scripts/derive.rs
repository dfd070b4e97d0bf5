//! Following the writes other clients make (the book's code above all):
//! re-deriving articles (`lua/derive_articles.lua`, with the shared
//! `lib/derive.lua`), indexing the voters of large voted sets in batches
//! (`lua/index_voters.lua`) and following a group's article set
//! (`lua/derive_group.lua`). Each writes only what differs, so running one
//! on data already right (votegraph's own writes, or another instance's
//! derivation) reads and writes nothing else.

use std::sync::LazyLock;

use redis::{ScriptInvocation, Value};

use super::library::{DERIVE, GROUP_LIST, INDEX_TIME, KARMA, VOTERS};
use super::{status, top_keys, Lua, ScriptReply, TopCursor};
use crate::domain::{ArticleId, GroupName, Period};
use crate::error::AppResult;
use crate::store::keys::{self, At};
use crate::store::{value_f64, value_str, Conn};

/// New articles are announced (`articlePosted`) when the deriver finds
/// them within this many seconds of their post time; older ones (an
/// import, a restore, a notification lost and caught by the sweep) are
/// filed silently.
pub const ANNOUNCE_SECS: u64 = 60;

/// Members (groups, voters) one derivation script goes through: Redis runs
/// nothing else while a script runs, so each stays short whatever an
/// article holds. An article with more voters is indexed in batches of
/// this many, a larger group followed in scan batches of half as many.
pub const SCRIPT_MEMBERS: u64 = 500;

/// What a derivation of named articles did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Derived {
    /// Articles whose rankings moved (new ones included).
    pub changed: u64,
    /// Articles with more new voters than one script indexes.
    pub voters_left: Vec<ArticleId>,
    /// Articles named but not (yet) in `time:` and `score:`: the book
    /// writes a post in several commands, and the first (its voted set)
    /// may be followed before the last. Only named articles are reported.
    pub absent: Vec<ArticleId>,
    /// Articles whose hash counts were rewritten to their voted sets'
    /// sizes: another writer's count may still land after its set write.
    pub recounted: Vec<ArticleId>,
    /// Named articles left to relist, the script's members spent.
    pub rest_to_relist: Vec<ArticleId>,
    /// Named articles left to derive (some relisted already).
    pub rest: Vec<ArticleId>,
}

/// What one batch of the sweep did.
#[derive(Debug, Clone, PartialEq)]
pub struct Swept {
    pub seen: u64,
    pub derived: Derived,
    /// Where the next batch starts; None once the sweep reached the newest.
    pub next: Option<TopCursor>,
}

fn ids(values: &[Value]) -> Option<Vec<ArticleId>> {
    values
        .iter()
        .map(|v| value_str(v)?.parse().ok().map(ArticleId))
        .collect()
}

fn count(v: &Value) -> Option<u64> {
    value_f64(v).filter(|n| *n >= 0.0).map(|n| n as u64)
}

/// Lists of ids, each answered as its length, then its ids.
fn id_lists<const N: usize>(mut values: &[Value]) -> Option<[Vec<ArticleId>; N]> {
    let mut lists: [Vec<ArticleId>; N] = std::array::from_fn(|_| Vec::new());
    for list in &mut lists {
        let (n, rest) = values.split_first()?;
        let n = usize::try_from(count(n)?).ok()?;
        *list = ids(rest.get(..n)?)?;
        values = &rest[n..];
    }
    values.is_empty().then_some(lists)
}

impl ScriptReply for Derived {
    fn read(reply: &Value) -> Option<Self> {
        let ("derived", [changed, lists @ ..]) = status(reply)? else {
            return None;
        };
        let [voters_left, absent, recounted, rest_to_relist, rest] = id_lists(lists)?;
        Some(Self {
            changed: count(changed)?,
            voters_left,
            absent,
            recounted,
            rest_to_relist,
            rest,
        })
    }
}

impl ScriptReply for Swept {
    fn read(reply: &Value) -> Option<Self> {
        let ("swept", [seen, changed, from, skip, lists @ ..]) = status(reply)? else {
            return None;
        };
        let from = value_str(from)?;
        let [voters_left] = id_lists(lists)?;
        Some(Self {
            seen: count(seen)?,
            derived: Derived {
                changed: count(changed)?,
                voters_left,
                ..Derived::default()
            },
            next: (!from.is_empty()).then(|| TopCursor {
                from: from.to_owned(),
                skip: count(skip).unwrap_or(0),
            }),
        })
    }
}

/// The derivation script, read as its answer to each mode.
const DERIVE_PARTS: [&str; 6] = [
    KARMA,
    GROUP_LIST,
    INDEX_TIME,
    VOTERS,
    DERIVE,
    include_str!("../lua/derive_articles.lua"),
];
static DERIVE_ARTICLES: LazyLock<Lua<Derived>> =
    LazyLock::new(|| Lua::new("derive-articles", &DERIVE_PARTS));
static SWEEP_ARTICLES: LazyLock<Lua<Swept>> =
    LazyLock::new(|| Lua::new("derive-articles", &DERIVE_PARTS));

/// The KEYS and ARGV every derivation shares (see the `.lua` file).
fn derive_invocation(invocation: &mut ScriptInvocation<'_>) {
    invocation.key(keys::TIME).key(keys::SCORE).key(keys::KARMA);
    top_keys(invocation, At::SINGLE);
    invocation
        .arg(keys::ARTICLE_PREFIX)
        .arg(keys::VOTED_PREFIX)
        .arg(keys::DOWNVOTED_PREFIX)
        .arg(keys::ARTICLE_GROUPS_SUFFIX)
        .arg(keys::USER_PREFIX)
        .arg(keys::USER_VOTES_SUFFIX)
        .arg(keys::USER_ARTICLES_SCORE_SUFFIX)
        .arg(keys::USER_ARTICLES_TIME_SUFFIX)
        .arg(keys::USER_TOP_INFIX)
        .arg(keys::GROUP_PREFIX)
        .arg(keys::GROUP_TOP_INFIX)
        .arg(keys::SCORE)
        .arg(keys::TIME)
        .arg(keys::SCORE_CHANNEL)
        .arg(keys::POSTED_CHANNEL)
        .arg(keys::VOTING_WINDOW_SECS)
        .arg(keys::VOTE_SCORE)
        .arg(keys::TOP_STEP)
        .arg(ANNOUNCE_SECS)
        .arg(SCRIPT_MEMBERS);
    for period in &Period::ALL[..4] {
        invocation.arg(period.secs().unwrap_or(u64::MAX));
    }
    for period in Period::ALL {
        invocation.arg(period.name());
    }
    invocation.arg(keys::CACHED_SUFFIX);
}

/// Re-derives the articles named (see `lib/derive.lua`), the first
/// `relist` of them with their group lists rebuilt, until the script's
/// members are spent ([`Derived::rest`], [`Derived::rest_to_relist`]).
pub async fn derive_articles(
    conn: &mut Conn,
    ids: &[ArticleId],
    relist: usize,
) -> AppResult<Derived> {
    let mut invocation = DERIVE_ARTICLES.invocation();
    derive_invocation(&mut invocation);
    invocation.arg("ids").arg(relist);
    for id in ids {
        invocation.arg(id.0);
    }
    DERIVE_ARTICLES.call(&invocation, conn).await
}

/// Re-derives up to `batch` articles of `time:` from `at` on.
pub async fn sweep_articles(conn: &mut Conn, at: &TopCursor, batch: u64) -> AppResult<Swept> {
    let mut invocation = SWEEP_ARTICLES.invocation();
    derive_invocation(&mut invocation);
    invocation
        .arg("sweep")
        .arg(&at.from)
        .arg(at.skip)
        .arg(batch);
    SWEEP_ARTICLES.call(&invocation, conn).await
}

/// One batch of a scan (a voted set's voters indexed, or articles dropped
/// from the net-vote rankings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanStep {
    /// The scan cursor to go on from; "0" at the end.
    pub next: String,
    /// Entries written (voters indexed, articles dropped).
    pub count: u64,
}

impl ScriptReply for ScanStep {
    fn read(reply: &Value) -> Option<Self> {
        let ("indexed" | "dropped", [next, n]) = status(reply)? else {
            return None;
        };
        Some(Self {
            next: value_str(next)?.to_owned(),
            count: count(n)?,
        })
    }
}

static INDEX_VOTERS: LazyLock<Lua<ScanStep>> = LazyLock::new(|| {
    Lua::new(
        "index-voters",
        &[INDEX_TIME, VOTERS, include_str!("../lua/index_voters.lua")],
    )
});

/// Indexes one batch of an article's upvoters (`down` false) or
/// downvoters; `snapshot` ("up,down", the sets' sizes when the indexing
/// began) is recorded once the scan ends.
pub async fn index_voters(
    conn: &mut Conn,
    id: ArticleId,
    down: bool,
    cursor: &str,
    snapshot: Option<&str>,
) -> AppResult<ScanStep> {
    let mut invocation = INDEX_VOTERS.invocation();
    invocation
        .key(keys::article(id))
        .key(if down {
            keys::downvoted(id)
        } else {
            keys::voted(id)
        })
        .key(keys::TIME)
        .arg(keys::USER_PREFIX)
        .arg(keys::USER_VOTES_SUFFIX)
        .arg(keys::VOTING_WINDOW_SECS)
        .arg(if down { "-" } else { "" })
        .arg(cursor)
        .arg(SCRIPT_MEMBERS)
        .arg(snapshot.unwrap_or(""));
    INDEX_VOTERS.call(&invocation, conn).await
}

/// How a group is compared with its mirror (see `derive_group.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupMode {
    /// The candidates, then the whole sets if their sizes still differ.
    Check,
    /// The whole sets.
    Full,
    /// One scan batch of the group's set (additions).
    Add,
    /// One scan batch of the mirror (removals).
    Remove,
}

/// What a group derivation answered, with the articles whose group sets
/// changed (their group lists are rebuilt by [`derive_articles`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupDerived {
    /// The mirror matches the group.
    Synced { changed: Vec<ArticleId> },
    /// The sets are too large to compare in one script: scan them.
    Scan { changed: Vec<ArticleId> },
    /// One scan batch done; "0" when the scan is over.
    Cursor {
        next: String,
        changed: Vec<ArticleId>,
    },
}

impl ScriptReply for GroupDerived {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("synced", changed) => Some(Self::Synced {
                changed: ids(changed)?,
            }),
            ("scan", changed) => Some(Self::Scan {
                changed: ids(changed)?,
            }),
            ("cursor", [next, changed @ ..]) => Some(Self::Cursor {
                next: value_str(next)?.to_owned(),
                changed: ids(changed)?,
            }),
            _ => None,
        }
    }
}

impl GroupDerived {
    pub fn into_changed(self) -> Vec<ArticleId> {
        match self {
            Self::Synced { changed } | Self::Scan { changed } | Self::Cursor { changed, .. } => {
                changed
            }
        }
    }
}

static DERIVE_GROUP: LazyLock<Lua<GroupDerived>> =
    LazyLock::new(|| Lua::new("derive-group", &[include_str!("../lua/derive_group.lua")]));

/// Follows one group's article set (see [`GroupMode`]); `candidates` are
/// `article:<id>` members touched with it.
pub async fn derive_group(
    conn: &mut Conn,
    name: &GroupName,
    mode: GroupMode,
    cursor: &str,
    candidates: &[ArticleId],
) -> AppResult<GroupDerived> {
    let mut invocation = DERIVE_GROUP.invocation();
    invocation
        .key(keys::group(name))
        .key(keys::group_indexed(name))
        .key(keys::GROUPS_BY_SIZE);
    for cache in keys::group_caches(name) {
        invocation.key(cache);
    }
    invocation
        .arg(name.as_str())
        .arg(keys::ARTICLE_PREFIX)
        .arg(keys::ARTICLE_GROUPS_SUFFIX)
        .arg(match mode {
            GroupMode::Check => "check",
            GroupMode::Full => "full",
            GroupMode::Add => "add",
            GroupMode::Remove => "remove",
        })
        .arg(cursor)
        .arg(SCRIPT_MEMBERS / 2)
        .arg(SCRIPT_MEMBERS);
    for &id in candidates {
        invocation.arg(keys::article(id));
    }
    DERIVE_GROUP.call(&invocation, conn).await
}

static DROP_ABSENT: LazyLock<Lua<ScanStep>> =
    LazyLock::new(|| Lua::new("drop-absent", &[include_str!("../lua/drop_absent.lua")]));

/// Drops one batch of articles gone from `time:` from the `top:<period>`
/// rankings (see `drop_absent.lua`).
pub async fn drop_absent(conn: &mut Conn, cursor: &str, batch: u64) -> AppResult<ScanStep> {
    let mut invocation = DROP_ABSENT.invocation();
    invocation.key(keys::TIME);
    top_keys(&mut invocation, At::SINGLE);
    invocation.arg(cursor).arg(batch);
    DROP_ABSENT.call(&invocation, conn).await
}
