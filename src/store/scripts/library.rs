//! The Lua functions several scripts share, each a file of
//! `src/store/lua/lib/` that says what it does and why. A script's parts
//! (see [`Lua::new`](super::Lua)) list the ones it calls before its body.
//! They spell no key and hold no number defined in Rust: keys, prefixes and
//! such numbers (the voting window) are their parameters.

/// `karma_score`, `add_karma` and `as_member`: karma with its time
/// tie-break folded into the score.
pub(super) const KARMA: &str = include_str!("../lua/lib/karma.lua");

/// `rate_limit(key, limit, window)`: one fixed-window counter, counted
/// before anything else is written (and the call's number in the window,
/// which the vote script keeps vote indexes by).
pub(super) const RATE_LIMIT: &str = include_str!("../lua/lib/rate_limit.lua");

/// `list_groups(article, groups_key)`: the article hash's `groups` field,
/// copied from its group set.
pub(super) const GROUP_LIST: &str = include_str!("../lua/lib/group_list.lua");

/// `index_time(posted)`: the whole second a vote index files an article
/// under (its post time rounded up), a number small sorted sets store as an
/// integer; `drop_closed`: its entries of closed articles, one range; `keep_index(index, seconds)`: an index's lifetime
/// lengthened, never shortened.
pub(super) const INDEX_TIME: &str = include_str!("../lua/lib/index_time.lua");

/// `index_vote(index, article, posted, dir, now, week)`: the poster's own
/// upvote in their `user:<name>:votes` index, kept to one week of votes.
/// Needs index_time.
pub(super) const VOTE_INDEX: &str = include_str!("../lua/lib/vote_index.lua");

/// `index_members` and `index_voters`: copying voters from a voted set into
/// their vote indexes, writing only what differs. Needs index_time.
pub(super) const VOTERS: &str = include_str!("../lua/lib/voters.lua");

/// `derive_article(c, id)`: everything votegraph keeps about one article,
/// re-derived from the book's keys. Needs karma, group_list and voters.
pub(super) const DERIVE: &str = include_str!("../lua/lib/derive.lua");

/// `moderation_context`, `log_entry`, `take_out`, `put_back`, `announce`
/// and `set_sessions`: what the moderation scripts share. Needs karma.
pub(super) const MODERATION: &str = include_str!("../lua/lib/moderation.lua");
