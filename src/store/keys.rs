//! Every Redis key and channel votegraph touches, in one place.
//!
//! The rule: no key name is spelled anywhere else, Lua included. A script
//! receives every key its caller can name (`article:<id>`, `score:`, the
//! poster's `user:<name>:articles:score`, `group:<g>` of the groups named in
//! the call, …) in `KEYS`, built by the functions here. Keys a script only
//! learns from the data it reads (the groups of a voted article give
//! `score:<g>`, its `poster` field gives `user:<name>:articles:score`, a new
//! id from `INCR article:` gives `article:<id>`) are built in Lua from the
//! prefixes and suffixes below, which the caller passes in `ARGV`, so their
//! spelling is defined here too. The functions below compose the same
//! constants, so a key built in Rust and one built in Lua always agree.
//! Numbers (the voting window, a vote's score) are passed in `ARGV` too,
//! from the constants here (see `scripts/mod.rs`).
//!
//! The article keys are the ones of *Redis in Action* chapter 1, so the book's
//! code and votegraph can share one Redis; keys votegraph adds follow the
//! `type:id:attr` convention. The keyspace table of docs/keyspace.md mirrors
//! this file.

use sha2::Digest;

use crate::client_addr::ClientAddr;
use crate::domain::{ArticleId, GroupName, ModAction, Period, Ranking, UserName};
use crate::rate::RateAction;

/// Sorted set `article:<id>` → post time + 432 × net votes (book).
pub const SCORE: &str = "score:";
/// Sorted set `article:<id>` → post time (book).
pub const TIME: &str = "time:";
/// Hash slug → article id.
pub const SLUGS: &str = "slug.to.id";
/// Hash: slug stem → the highest numeric suffix handed out for it.
pub const SLUG_SUFFIXES: &str = "slug:last-suffix";
/// Sorted set `user:<name>` → karma with the time tie-break folded in.
pub const KARMA: &str = "karma:";
/// Pub/sub channel a vote script publishes score changes on.
pub const SCORE_CHANNEL: &str = "votegraph:score-changed";
/// Pub/sub channel of new posts (`{id, groups, at}`), published by the post
/// script for `Subscription.articlePosted`.
pub const POSTED_CHANNEL: &str = "votegraph:article-posted";
/// Pub/sub channel of ended sessions (the SHA-256 of the token, as text),
/// published by `logOut` so every instance closes the WebSockets that were
/// authenticated with it.
pub const SESSION_ENDED_CHANNEL: &str = "votegraph:session-ended";

/// Seconds during which an article can be voted on (book: one week).
pub const VOTING_WINDOW_SECS: u64 = 7 * 24 * 60 * 60;
/// Score points one upvote is worth (book: 86,400 s / 200 votes).
pub const VOTE_SCORE: f64 = 432.0;
/// How long a group ranking built by ZINTERSTORE is cached (book: 60 s).
pub const GROUP_CACHE_SECS: u64 = 60;
/// How long a login token stays valid.
pub const SESSION_TTL_SECS: u64 = 30 * 24 * 60 * 60;

/// The string counter `INCR`ed for a new article's id (book). It is
/// spelled like [`ARTICLE_PREFIX`], as the book does.
pub const ARTICLE_IDS: &str = "article:";
/// Prefix of an article's hash key, which is also its member in every set
/// and sorted set (`article:7`), as the book writes it.
pub const ARTICLE_PREFIX: &str = "article:";
/// Suffix of an article's group set, after its member (`article:7:groups`).
pub const ARTICLE_GROUPS_SUFFIX: &str = ":groups";
/// Prefix of an article's upvoter set, before its id (`voted:7`, book).
pub const VOTED_PREFIX: &str = "voted:";
/// Prefix of an article's downvoter set, before its id (`downvoted:7`).
pub const DOWNVOTED_PREFIX: &str = "downvoted:";
/// Prefix of a group's article set, before its name (`group:redis`, book).
pub const GROUP_PREFIX: &str = "group:";
/// Prefix of a user's hash key, which is also the user's member in the
/// voted sets, `karma:` and an article's `poster` field (`user:alice`).
pub const USER_PREFIX: &str = "user:";
/// Suffixes of a user's article rankings, after the user's member
/// (`user:alice:articles:score`).
pub const USER_ARTICLES_SCORE_SUFFIX: &str = ":articles:score";
pub const USER_ARTICLES_TIME_SUFFIX: &str = ":articles:time";
/// Suffix of a user's vote index, after the user's member
/// (`user:alice:votes`).
pub const USER_VOTES_SUFFIX: &str = ":votes";
/// Prefix of an anonymous viewer's member and counters (`client:10.0.0.1`).
pub const CLIENT_PREFIX: &str = "client:";
/// Prefix of a session key, before the token's SHA-256.
pub const SESSION_PREFIX: &str = "session:";

/// `article:<id>`: the article hash, also the member used in every set.
pub fn article(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}")
}

/// The article an `article:<id>` sorted-set member stands for; other
/// members are ignored.
pub fn article_id(member: &str) -> Option<ArticleId> {
    member
        .strip_prefix(ARTICLE_PREFIX)
        .and_then(|n| n.parse().ok())
        .map(ArticleId)
}

/// `article:<id>:groups`: set of the groups an article is in (votegraph's
/// reverse index of `group:<name>`).
pub fn article_groups(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}{ARTICLE_GROUPS_SUFFIX}")
}

/// `group:<name>`: set of `article:<id>` members (book).
pub fn group(name: &GroupName) -> String {
    format!("{GROUP_PREFIX}{}", name.as_str())
}

/// `score:<name>` / `time:<name>`: a group's ranking, built by
/// `ZINTERSTORE` and cached (book).
pub fn group_ranking(name: &GroupName, ranking: Ranking) -> String {
    format!("{}{}", ranking_key(ranking), name.as_str())
}

/// `group:<name>:indexed`: set of the `article:<id>` members whose group
/// lists (`article:<id>:groups`) name the group: what votegraph has
/// derived from `group:<name>`, kept with it by the post and set-groups
/// scripts and compared with it by the deriver to follow other writers.
pub fn group_indexed(name: &GroupName) -> String {
    format!("{GROUP_PREFIX}{}{GROUP_INDEXED_SUFFIX}", name.as_str())
}

/// The suffix of a group's mirror (see [`group_indexed`]).
pub const GROUP_INDEXED_SUFFIX: &str = ":indexed";

/// A group's cached rankings, as the deriver drops them when the group's
/// articles change: `score:<name>`, `time:<name>` (the book's) and
/// `group:<name>:top:<period>`.
pub fn group_caches(name: &GroupName) -> Vec<String> {
    let mut caches = vec![
        group_ranking(name, Ranking::Score),
        group_ranking(name, Ranking::Time),
    ];
    caches.extend(Period::ALL.iter().map(|&p| group_top(name, p)));
    caches
}

/// What a write to a key means for what votegraph derives from the
/// book's keys (see `deriver.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touched {
    /// `voted:<id>` or `downvoted:<id>`: the article's votes.
    Article(ArticleId),
    /// `group:<name>`: the group's articles.
    Group(GroupName),
    /// `time:` or `score:` as a whole (deleted, restored or renamed):
    /// every article.
    Everything,
}

/// Reads which derived data a key written by any client concerns; None for
/// keys votegraph derives nothing from. Group names hold no ':', so a
/// group's own derived keys (its cached rankings, its mirror) never read
/// as a group; nor do sets named outside votegraph's group names.
pub fn touched(key: &str) -> Option<Touched> {
    if key == TIME || key == SCORE {
        return Some(Touched::Everything);
    }
    let id = key
        .strip_prefix(VOTED_PREFIX)
        .or_else(|| key.strip_prefix(DOWNVOTED_PREFIX));
    if let Some(id) = id {
        return match id.parse::<u64>() {
            Ok(n) if n > 0 && !id.starts_with('+') => Some(Touched::Article(ArticleId(n))),
            _ => None,
        };
    }
    let name = key.strip_prefix(GROUP_PREFIX)?;
    GroupName::parse(name).ok().map(Touched::Group)
}

/// Reads what a keyspace notification (`event` on `key`) asks the deriver
/// to derive. As [`touched`], except that `time:` and `score:` count only
/// when replaced as a whole: a server whose `notify-keyspace-events` also
/// has `z` (or `A`) reports every member written to them, each vote's
/// included, and a member's own change is followed through its voted set
/// (or the sweep), not by deriving every article again.
pub fn notified(key: &str, event: &str) -> Option<Touched> {
    const MEMBER_EVENTS: [&str; 8] = [
        "zadd",
        "zincr",
        "zrem",
        "zremrangebyscore",
        "zremrangebyrank",
        "zremrangebylex",
        "zpopmin",
        "zpopmax",
    ];
    if (key == TIME || key == SCORE) && MEMBER_EVENTS.contains(&event) {
        return None;
    }
    touched(key)
}

/// The keyspace-notification patterns the deriver subscribes to, in Redis
/// database `db`: the voted sets, the group sets, `time:` and `score:`.
pub fn keyspace_patterns(db: i64) -> Vec<String> {
    [
        format!("{VOTED_PREFIX}*"),
        format!("{DOWNVOTED_PREFIX}*"),
        format!("{GROUP_PREFIX}*"),
        TIME.to_owned(),
        SCORE.to_owned(),
    ]
    .into_iter()
    .map(|key| format!("__keyspace@{db}__:{key}"))
    .collect()
}

/// The key a keyspace notification's channel names, in database `db`.
pub fn notified_key(channel: &str, db: i64) -> Option<&str> {
    channel.strip_prefix(&format!("__keyspace@{db}__:"))
}

/// `user:<name>`: account hash (`name`, `password` as an argon2 PHC string,
/// `created`); also the user's member in sets and in `poster` fields.
pub fn user(name: &str) -> String {
    format!("{USER_PREFIX}{name}")
}

/// `voted:<id>`: set of upvoters (book).
pub fn voted(id: ArticleId) -> String {
    format!("{VOTED_PREFIX}{id}")
}

/// `downvoted:<id>`: set of downvoters, beside the book's `voted:<id>`.
pub fn downvoted(id: ArticleId) -> String {
    format!("{DOWNVOTED_PREFIX}{id}")
}

/// `user:<name>:articles:score` / `:time`: a user's articles ranked like the
/// front page. The time ranking is kept by the post script and the deriver;
/// the score ranking is a cache, built by the feed read that needs it
/// (`ZINTERSTORE` of `score:` and the time ranking) for
/// [`GROUP_CACHE_SECS`] and kept current by votes while its owner's marker
/// ([`user_cached`]) lives: every vote moves an article's score, and
/// moving a member of a small (listpack) sorted set is the dearest write a
/// vote would make.
pub fn user_articles(name: &str, ranking: Ranking) -> String {
    format!("{USER_PREFIX}{name}{}", user_articles_suffix(ranking))
}

/// `user:<name>:votes`: the user's votes of the last week, for `myVote`: a
/// sorted set of `article:<id>` → the article's post time rounded up to the
/// whole second (so a small index stores integers, which a vote's insert
/// reads cheaply), positive for an upvote and negative for a downvote. It
/// is derived from the voted sets
/// (which stay authoritative for the vote logic), kept by the vote and post
/// scripts: each of the user's votes drops its closed articles and keeps
/// it a week, so it holds only open votes after a vote and expires once
/// all have closed (see `lua/lib/vote_index.lua`).
pub fn user_votes(name: &str) -> String {
    format!("{USER_PREFIX}{name}{USER_VOTES_SUFFIX}")
}

/// Present once every vote of the open voting window has been copied from
/// the voted sets into the `user:<name>:votes` indexes (votes written before
/// votegraph kept them, or by the book's code). A string holding the Unix
/// second the pass finished; no expiry.
///
/// Named `type:id:attr` like every votegraph key: type `index` (a structure
/// votegraph derives from the book's data), id `user-votes` (which one: the
/// `user:<name>:votes` family), attribute `built`. A future derived index
/// gets its own `index:<name>:built`, and `SCAN MATCH index:*` lists them.
pub const VOTES_INDEX_BUILT: &str = "index:user-votes:built";

/// Hash: a user name folded (see `UserName::folded`) → the account's name,
/// so that names differing only in case are one name. Built from the
/// existing accounts on the first start (see [`NAMES_INDEX_BUILT`]).
pub const USERS_BY_FOLDED_NAME: &str = "users:by-folded-name";

/// Marker set once [`USERS_BY_FOLDED_NAME`] holds every account; sign-ups
/// wait for it, so no case twin slips in while it is built.
pub const NAMES_INDEX_BUILT: &str = "index:user-names:built";

/// `user:<name>:posted:<sha256 hex of the link>`: the id of the article
/// the user posted with that (normalised) link, expiring after
/// `--post-dedupe-secs`; a repost of the link meanwhile answers it.
pub fn user_posted(name: &str, link: &str) -> String {
    let digest = hex::encode(sha2::Sha256::digest(link.as_bytes()));
    format!("{USER_PREFIX}{name}:posted:{digest}")
}

/// `user:<name>:login-attempts`: logIn attempts counted since the first one
/// of the current window, expiring with the window; deleted on success.
pub fn login_attempts(name: &str) -> String {
    format!("{USER_PREFIX}{name}:login-attempts")
}

/// `article:<id>:viewers`: set of the viewers (`user:<name>` or
/// `client:<ip>`) whose view of the article was counted in the current view
/// window; it expires with the window, created by the first view after it.
pub fn article_viewers(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}:viewers")
}

/// `client:<ip>`: an anonymous viewer, as a member of `article:<id>:viewers`
/// and the prefix of its rate-limit counters.
pub fn client(addr: ClientAddr) -> String {
    format!("{CLIENT_PREFIX}{addr}")
}

/// `user:<name>:rate:<action>`: the user's calls of `action` in the current
/// fixed window (a counter expiring with the window).
pub fn user_rate(name: &str, action: RateAction) -> String {
    format!("{USER_PREFIX}{name}{}", user_rate_suffix(action))
}

/// The suffix of a user's counter of `action`, after `user:<name>`.
pub fn user_rate_suffix(action: RateAction) -> String {
    format!(":rate:{}", action.as_str())
}

/// `client:<ip>:rate:<action>`: the client address' calls of `action` in the
/// current fixed window (a counter expiring with the window).
pub fn client_rate(addr: ClientAddr, action: RateAction) -> String {
    format!("{CLIENT_PREFIX}{addr}:rate:{}", action.as_str())
}

/// `rate:site:<action>`: calls of `action` by every client together in the
/// current fixed window, for the writes also limited site-wide.
pub fn site_rate(action: RateAction) -> String {
    format!("rate:site:{}", action.as_str())
}

/// The member standing for a user in `voted:<id>` sets, `poster` fields
/// and `karma:` (`user:alice`).
pub fn member(name: &UserName) -> String {
    user(name.as_str())
}

/// `session:<sha256 of token>`: string holding the user name, with a TTL.
pub fn session(token_hash: &str) -> String {
    format!("{SESSION_PREFIX}{token_hash}")
}

/// The book's sorted-set key of `ranking` (`score:` or `time:`), also the
/// prefix of a group's cached ranking (`score:<group>`): the book names
/// it after the global one (`score:` + `redis`).
pub fn ranking_key(ranking: Ranking) -> &'static str {
    match ranking {
        Ranking::Score => SCORE,
        Ranking::Time => TIME,
    }
}

/// The suffix of a user's ranking of their own articles by `ranking`.
pub fn user_articles_suffix(ranking: Ranking) -> &'static str {
    match ranking {
        Ranking::Score => USER_ARTICLES_SCORE_SUFFIX,
        Ranking::Time => USER_ARTICLES_TIME_SUFFIX,
    }
}

/// Prefix of the site's net-vote rankings, `top:<period>`.
pub const TOP_PREFIX: &str = "top:";
/// Infix of a group's net-vote rankings, `group:<name>:top:<period>`.
pub const GROUP_TOP_INFIX: &str = ":top:";
/// Infix of a user's net-vote rankings, `user:<name>:articles:top:<period>`.
pub const USER_TOP_INFIX: &str = ":articles:top:";
/// A net-vote ranking's score: net votes × 2^32 + the post time in whole
/// seconds, so one `ZREVRANGE` ranks by net votes, then newest first, and
/// the post time is read back from the score (the period filter).
pub const TOP_STEP: f64 = 4_294_967_296.0;

/// `top:<period>`: sorted set `article:<id>` → net votes × 2^32 + post time
/// (whole seconds), of the articles posted within the period. Kept by the
/// post and vote scripts, pruned of articles that grew too old, and rebuilt
/// from the book's `score:` and `time:` (net votes = (score − time) / 432)
/// by the top-index pass (see `top.rs`).
pub fn top(period: Period) -> String {
    format!("{TOP_PREFIX}{}", period.name())
}

/// `group:<name>:top:<period>`: a group's net-vote ranking, built by
/// `ZINTERSTORE` of `top:<period>` and the group, cached like the book's
/// `score:<group>` and kept current by the write scripts while it lives.
pub fn group_top(name: &GroupName, period: Period) -> String {
    format!(
        "{GROUP_PREFIX}{}{GROUP_TOP_INFIX}{}",
        name.as_str(),
        period.name()
    )
}

/// `user:<name>:articles:top:<period>`: a user's net-vote ranking, built
/// and kept like a group's.
pub fn user_top(name: &str, period: Period) -> String {
    format!("{USER_PREFIX}{name}{USER_TOP_INFIX}{}", period.name())
}

/// The suffix of `group:<name>:cached` and `user:<name>:cached`.
pub const CACHED_SUFFIX: &str = ":cached";

/// `group:<name>:cached`: present while one of the group's `TOP_*`
/// rankings ([`group_top`]) may be cached. The feed script sets it, with
/// the ranking's lifetime, each time it builds one, so a vote tests one
/// name for the group instead of five.
pub fn group_cached(name: &GroupName) -> String {
    format!("{GROUP_PREFIX}{}{CACHED_SUFFIX}", name.as_str())
}

/// `user:<name>:cached`: the same for a user's cached rankings, the
/// `TOP_*` ones ([`user_top`]) and the score one ([`user_articles`]).
pub fn user_cached(name: &str) -> String {
    format!("{USER_PREFIX}{name}{CACHED_SUFFIX}")
}

/// Present once the `top:<period>` rankings hold every article of `time:`
/// (built from `score:` and `time:`); a string holding the Unix time.
pub const TOP_INDEX_BUILT: &str = "index:top:built";

/// Hash period → the post time up to which articles have been removed
/// from `top:<period>` (where the pruning resumes).
pub const TOP_PRUNED: &str = "index:top:pruned";

/// Hash: where the sweep through every article and group (see
/// `deriver.rs`) goes on: `from` (a post time of `time:`, `-inf` at the
/// start), `skip` (articles posted at `from` already done), `groups` (the
/// `SCAN` cursor of the group sets). Shared by all instances.
pub const SWEEP: &str = "index:sweep";

/// String, a lease of one round of the sweep: the instance that sets it
/// (`SET NX PX`, for most of a round) runs that round, so several
/// instances sweep no faster and cost Redis no more than one.
pub const SWEEP_LEASE: &str = "index:sweep:lease";

/// Sorted set group name → minus its number of articles: the group
/// directory, largest first and by name among equals in one `ZRANGE`. Kept
/// by the post and set-groups scripts; counts are refreshed from the
/// `group:<name>` sets by the upkeep (and rebuilt by a `SCAN` of them on
/// the first start), so groups changed by the book's code are counted too.
pub const GROUPS_BY_SIZE: &str = "groups:by-size";

/// Present once the group directory was built by scanning the
/// `group:<name>` sets; a string holding the Unix time.
pub const GROUPS_INDEX_BUILT: &str = "index:groups:built";

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

// Moderation (docs/keyspace.md says what each holds).
/// Pub/sub channel of articles taken out or put back, bans and roles.
pub const MODERATED_CHANNEL: &str = "votegraph:moderated";
/// Sorted set `article:<id>` → flags: the moderators' queue.
pub const MODERATION_QUEUE: &str = "moderation:queue";
/// Set of the admins' names.
pub const ADMINS: &str = "users:admins";
/// The log's entry counter, entries (`modlog:<n>`), all entries, and
/// an action's (`modlog:action:<ACTION>`).
pub const MODLOG_LAST_ID: &str = "modlog:last-id";
pub const MODLOG_ENTRY_PREFIX: &str = "modlog:";
pub const MODLOG: &str = "modlog:all";
pub const MODLOG_ACTION_PREFIX: &str = "modlog:action:";
/// The entries about an article or a user, after its member.
pub const MODLOG_SUFFIX: &str = ":modlog";
/// A user's articles taken out of every ranking, after the user's member.
pub const USER_ARTICLES_OUT_SUFFIX: &str = ":articles:out";
/// Present once every session was filed in its `user:<name>:sessions`.
pub const SESSIONS_INDEX_BUILT: &str = "index:user-sessions:built";

pub fn modlog_action(action: ModAction) -> String {
    format!("{MODLOG_ACTION_PREFIX}{}", action.as_str())
}

pub fn article_modlog(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}{MODLOG_SUFFIX}")
}

pub fn user_modlog(name: &str) -> String {
    format!("{USER_PREFIX}{name}{MODLOG_SUFFIX}")
}

/// `article:<id>:flags`: hash `user:<name>` → the flag's reason.
pub fn article_flags(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}:flags")
}

/// `user:<name>:sessions`: the token hashes of the user's sessions.
pub fn user_sessions(name: &str) -> String {
    format!("{USER_PREFIX}{name}:sessions")
}

pub fn user_articles_out(name: &str) -> String {
    format!("{USER_PREFIX}{name}{USER_ARTICLES_OUT_SUFFIX}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_read_back_as_article_ids() {
        assert_eq!(article_id("article:12"), Some(ArticleId(12)));
        assert_eq!(article_id("post:12"), None);
        assert_eq!(article_id(&article(ArticleId(7))), Some(ArticleId(7)));
    }

    /// The keys built from the constants are spelled exactly as the book
    /// and docs/keyspace.md's table spell them: the book's own code
    /// shares the Redis.
    #[test]
    fn notifications_name_what_to_derive() {
        let seven = Some(Touched::Article(ArticleId(7)));
        assert_eq!(notified("voted:7", "sadd"), seven);
        assert_eq!(notified("downvoted:7", "del"), seven);
        assert_eq!(notified("voted:+7", "sadd"), None);
        let news = GroupName::parse("news").unwrap();
        assert_eq!(notified("group:news", "srem"), Some(Touched::Group(news)));
        assert_eq!(notified("group:news:cached", "expire"), None);
        // A member's change to time: or score: is not a replacement.
        for event in ["zincr", "zadd", "zrem", "zpopmin"] {
            assert_eq!(notified(TIME, event), None, "{event}");
            assert_eq!(notified(SCORE, event), None, "{event}");
        }
        for event in ["del", "rename_to", "restore", "zunionstore"] {
            assert_eq!(notified(TIME, event), Some(Touched::Everything), "{event}");
            assert_eq!(notified(SCORE, event), Some(Touched::Everything), "{event}");
        }
    }

    #[test]
    fn keys_keep_their_documented_spelling() {
        let id = ArticleId(7);
        let group = GroupName::parse("redis").unwrap();
        assert_eq!(article(id), "article:7");
        assert_eq!(article_groups(id), "article:7:groups");
        assert_eq!(article_viewers(id), "article:7:viewers");
        assert_eq!(voted(id), "voted:7");
        assert_eq!(downvoted(id), "downvoted:7");
        assert_eq!(self::group(&group), "group:redis");
        assert_eq!(group_ranking(&group, Ranking::Score), "score:redis");
        assert_eq!(group_ranking(&group, Ranking::Time), "time:redis");
        assert_eq!(user("alice"), "user:alice");
        assert_eq!(
            user_articles("alice", Ranking::Score),
            "user:alice:articles:score"
        );
        assert_eq!(
            user_articles("alice", Ranking::Time),
            "user:alice:articles:time"
        );
        assert_eq!(login_attempts("alice"), "user:alice:login-attempts");
        assert_eq!(
            user_posted("alice", "https://example.com/"),
            "user:alice:posted:0f115db062b7c0dd030b16878c99dea5c354b49dc37b38eb8846179c7783e9d7"
        );
        assert_eq!(user_votes("alice"), "user:alice:votes");
        assert_eq!(user_rate("alice", RateAction::Vote), "user:alice:rate:vote");
        let addr = ClientAddr::from("10.0.0.1".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(client(addr), "client:10.0.0.1");
        assert_eq!(
            client_rate(addr, RateAction::SignUp),
            "client:10.0.0.1:rate:sign-up"
        );
        assert_eq!(session("abc"), "session:abc");
        assert_eq!(article_modlog(id), "article:7:modlog");
        assert_eq!(user_modlog("alice"), "user:alice:modlog");
        assert_eq!(article_flags(id), "article:7:flags");
        assert_eq!(user_sessions("alice"), "user:alice:sessions");
        assert_eq!(user_articles_out("alice"), "user:alice:articles:out");
        assert_eq!(modlog_action(ModAction::BanUser), "modlog:action:BAN_USER");
        assert_eq!(
            (ARTICLE_IDS, SCORE, TIME, KARMA, SLUGS, SLUG_SUFFIXES),
            (
                "article:",
                "score:",
                "time:",
                "karma:",
                "slug.to.id",
                "slug:last-suffix"
            )
        );
    }
}
