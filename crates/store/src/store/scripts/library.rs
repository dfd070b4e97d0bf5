//! The Lua functions several scripts share, each a file of
//! `src/store/lua/lib/` that says what it does. A script's parts (see
//! [`Lua::new`](super::Lua)) list the ones it calls before its body.

pub(super) const KARMA: &str = include_str!("../lua/lib/karma.lua");
pub(super) const RATE_LIMIT: &str = include_str!("../lua/lib/rate_limit.lua");
pub(super) const GROUP_LIST: &str = include_str!("../lua/lib/group_list.lua");
pub(super) const GROUP_SIZES: &str = include_str!("../lua/lib/group_sizes.lua");
pub(super) const INDEX_TIME: &str = include_str!("../lua/lib/index_time.lua");
/// Needs index_time.
pub(super) const VOTE_INDEX: &str = include_str!("../lua/lib/vote_index.lua");
/// `apply_ahead` and `apply_drained`: a queued vote applied by its write
/// and by the drain, in either order. Needs index_time and vote_index.
pub(super) const QUEUED_VOTE: &str = include_str!("../lua/lib/queued_vote.lua");
/// Needs index_time.
pub(super) const VOTERS: &str = include_str!("../lua/lib/voters.lua");

/// `derive_article(c, id)`: everything votegraph keeps about one article,
/// re-derived from the book's keys. Needs karma, group_list and voters.
pub(super) const DERIVE: &str = include_str!("../lua/lib/derive.lua");

/// `moderation_context`, `log_entry`, `take_out`, `put_back`, `announce`
/// and `announce_sessions`: what the moderation scripts share. Needs karma.
pub(super) const MODERATION: &str = include_str!("../lua/lib/moderation.lua");

/// `session_user(session, user_prefix)`: who a session is as its account
/// stands now; `session_value(name)`: a new session's value.
pub(super) const SESSION: &str = include_str!("../lua/lib/session.lua");
