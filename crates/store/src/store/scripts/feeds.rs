//! Feed pages: a page of any article ranking from a rank or right after a
//! cursor's position, building a missing cached ranking first
//! (`lua/feed.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::{Call, Lua, ScoredMembers, ScriptReply, MAX_TIES};
use crate::store::keys::{self, At};
use crate::store::value_f64;

/// Members a feed page may skip as too old for its period before it
/// stops short (pruning keeps them to a second's worth of posts).
const FEED_SCAN: usize = 2000;

/// The list's size and up to `first + 1` members, with their values.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedReply {
    pub total: u64,
    pub members: Vec<(String, f64)>,
}

impl ScriptReply for FeedReply {
    fn read(reply: &Value) -> Option<Self> {
        let Value::Array(parts) = reply else {
            return None;
        };
        let [total, members] = parts.as_slice() else {
            return None;
        };
        Some(Self {
            total: value_f64(total)? as u64,
            members: ScoredMembers::read(members)?.0,
        })
    }
}

/// A page of a ranking, from a rank or right after a position, with one
/// more member than asked to tell whether there is a next page. A missing
/// cached ranking (a group's or a user's) is built first, and a `TOP_*`
/// one sets its owner's `:cached` marker for as long, which votes test
/// before moving such rankings. Reaching a position costs `O(log n)`, so a
/// deep page costs what the first does.
static FEED: LazyLock<Lua<FeedReply>> =
    LazyLock::new(|| Lua::new("feed", &[include_str!("../lua/feed.lua")]));

#[derive(Clone, Copy)]
pub enum Start<'a> {
    Rank(usize),
    /// Right after this ranking value (written exactly) and member.
    After {
        value: &'a str,
        member: &'a str,
    },
}

/// What [`feed`] reads: the ranking, and the two sets it is built from when
/// it is a cache that may be missing.
pub struct FeedSource {
    pub key: String,
    pub build: Option<(String, String)>,
    /// Skip members posted before this Unix time (net-vote rankings).
    pub min_time: u64,
    /// The owner's `:cached` marker, set when a `TOP_*` ranking is built.
    pub marker: Option<String>,
}

/// The feed script's call for `first` members (and one more) of `source`
/// from `start`.
pub fn feed(at: At, source: &FeedSource, start: Start<'_>, first: usize) -> Call {
    let key = at.key(&source.key);
    let mut invocation = FEED.invocation();
    invocation.key(&key);
    match &source.build {
        Some((from, members)) => invocation.key(at.key(from)).key(at.key(members)).arg(1),
        None => invocation.key(&key).key(&key).arg(0),
    };
    invocation.key(source.marker.as_ref().map_or(key.clone(), |m| at.key(m)));
    invocation
        .arg(first)
        .arg(source.min_time)
        .arg(keys::GROUP_CACHE_SECS)
        .arg(MAX_TIES)
        .arg(FEED_SCAN)
        .arg(keys::TOP_STEP);
    match start {
        Start::Rank(rank) => invocation.arg(rank),
        Start::After { value, member } => invocation.arg(0).arg(value).arg(at.key(member)),
    };
    FEED.pipelined(&invocation)
}
