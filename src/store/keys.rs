//! Every Redis key and channel votegraph touches, in one place.
//!
//! The numbers and the channel below are written into the Lua scripts when
//! they are loaded (`scripts.rs`); key names there are the book's, literally
//! (`article:` is the INCR counter handing out article ids). Keys votegraph
//! added later (rate-limit counters, `article:<id>:viewers`) reach the
//! scripts as KEYS, built here, and are never spelled in Lua.
//!
//! The article keys are the ones of *Redis in Action* chapter 1, so the book's
//! code and votegraph can share one Redis; keys votegraph adds follow the
//! `type:id:attr` convention. The README's keyspace table mirrors this file.

use crate::client::ClientAddr;
use crate::domain::{ArticleId, GroupName};

/// Sorted set `article:<id>` → post time + 432 × net votes (book).
pub const SCORE: &str = "score:";
/// Sorted set `article:<id>` → post time (book).
pub const TIME: &str = "time:";
/// Hash slug → article id (seed 003).
pub const SLUGS: &str = "slug.to.id";
/// Hash: slug stem → the highest numeric suffix handed out for it.
pub const SLUG_SUFFIXES: &str = "slug:last-suffix";
/// Sorted set `user:<name>` → karma with the time tie-break folded in.
pub const KARMA: &str = "karma:";
/// Pub/sub channel a vote script publishes score changes on.
pub const SCORE_CHANNEL: &str = "votegraph:score-changed";

/// Seconds during which an article can be voted on (book: one week).
pub const VOTING_WINDOW_SECS: u64 = 7 * 24 * 60 * 60;
/// Score points one upvote is worth (book: 86,400 s / 200 votes).
pub const VOTE_SCORE: f64 = 432.0;
/// How long a group ranking built by ZINTERSTORE is cached (book: 60 s).
pub const GROUP_CACHE_SECS: u64 = 60;
/// How long a login token stays valid.
pub const SESSION_TTL_SECS: u64 = 30 * 24 * 60 * 60;

/// Prefix of an article's hash key, which is also its member in every set
/// and sorted set (`article:7`), as the book writes it.
pub const ARTICLE_PREFIX: &str = "article:";
/// Prefix of a user's hash key, which is also the user's member in the
/// voted sets, `karma:` and an article's `poster` field (`user:alice`).
pub const USER_PREFIX: &str = "user:";

/// `article:<id>`: the article hash, also the member used in every set.
pub fn article(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}")
}

/// `article:<id>:groups`: set of the groups an article is in (votegraph's
/// reverse index of `group:<name>`).
pub fn article_groups(id: ArticleId) -> String {
    format!("article:{id}:groups")
}

/// `group:<name>`: set of `article:<id>` members (book).
pub fn group(name: &GroupName) -> String {
    format!("group:{}", name.as_str())
}

/// `user:<name>`: account hash (`name`, `password` as an argon2 PHC string, `created`).
pub fn user(name: &str) -> String {
    format!("{USER_PREFIX}{name}")
}

/// `voted:<id>`: set of upvoters (book).
pub fn voted(id: ArticleId) -> String {
    format!("voted:{id}")
}

/// `downvoted:<id>`: set of downvoters, beside the book's `voted:<id>`.
pub fn downvoted(id: ArticleId) -> String {
    format!("downvoted:{id}")
}

/// `user:<name>:articles:score` / `:time`: a user's articles ranked like the
/// front page.
pub fn user_articles(name: &str, ranking: Ranking) -> String {
    match ranking {
        Ranking::Score => format!("user:{name}:articles:score"),
        Ranking::Time => format!("user:{name}:articles:time"),
    }
}

/// `user:<name>:login-attempts`: logIn attempts counted since the first one
/// of the current window, expiring with the window; deleted on success.
pub fn login_attempts(name: &str) -> String {
    format!("user:{name}:login-attempts")
}

/// `article:<id>:viewers`: set of the viewers (`user:<name>` or
/// `client:<ip>`) whose view of the article was counted in the current view
/// window; it expires with the window, created by the first view after it.
pub fn article_viewers(id: ArticleId) -> String {
    format!("article:{id}:viewers")
}

/// `client:<ip>`: an anonymous viewer, as a member of `article:<id>:viewers`
/// and the prefix of its rate-limit counters.
pub fn client(addr: ClientAddr) -> String {
    format!("client:{addr}")
}

/// `user:<name>:rate:<action>`: the user's calls of `action` in the current
/// fixed window (a counter expiring with the window).
pub fn user_rate(name: &str, action: RateAction) -> String {
    format!("user:{name}:rate:{}", action.as_str())
}

/// `client:<ip>:rate:<action>`: the client address' calls of `action` in the
/// current fixed window (a counter expiring with the window).
pub fn client_rate(addr: ClientAddr, action: RateAction) -> String {
    format!("client:{addr}:rate:{}", action.as_str())
}

/// A write that is rate limited; its name is the last part of its counter's
/// key (`user:<name>:rate:vote`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateAction {
    SignUp,
    LogIn,
    View,
    Post,
    Vote,
    SetGroups,
    RenameSlug,
}

impl RateAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RateAction::SignUp => "sign-up",
            RateAction::LogIn => "log-in",
            RateAction::View => "view",
            RateAction::Post => "post",
            RateAction::Vote => "vote",
            RateAction::SetGroups => "set-groups",
            RateAction::RenameSlug => "rename-slug",
        }
    }

    /// What was counted, for "too many …" in the error message.
    pub fn counted(self) -> &'static str {
        match self {
            RateAction::SignUp => "sign-ups",
            RateAction::LogIn => "login attempts",
            RateAction::View => "views",
            RateAction::Post => "posts",
            RateAction::Vote => "votes",
            RateAction::SetGroups => "group changes",
            RateAction::RenameSlug => "slug renames",
        }
    }
}

/// `session:<sha256 of token>`: string holding the user name, with a TTL.
pub fn session(token_hash: &str) -> String {
    format!("session:{token_hash}")
}

/// Which global ranking a list is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    Score,
    Time,
}

impl Ranking {
    /// The book's sorted-set key (`score:` or `time:`), also the prefix of a
    /// group's cached ranking (`score:<group>`).
    pub fn key(self) -> &'static str {
        match self {
            Ranking::Score => SCORE,
            Ranking::Time => TIME,
        }
    }
}

/// `document:<sha256>`: the text of an automatic persisted query, by the
/// hex SHA-256 of that text; it expires with the persisted-query TTL.
pub fn document(sha256_hex: &str) -> String {
    format!("document:{sha256_hex}")
}

/// Sorted set `document:<sha256>` → Unix time of its registration: the
/// persisted documents, oldest first, so their number is capped (the
/// registration script drops the oldest) and expired ones are pruned.
/// Members are whole key names, so the script deletes them as they are.
pub const DOCUMENTS: &str = "document:registered";
