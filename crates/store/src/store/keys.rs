//! Every Redis key and channel votegraph touches, in one place: no key name
//! is spelled anywhere else, Lua included. A script gets the keys its
//! caller can name in `KEYS`; keys it learns from data (a voted article's
//! groups, its poster) it builds from the prefixes and suffixes below,
//! passed in `ARGV`, so a key built in Rust and one built in Lua agree.
//! docs/keyspace.md says what each key holds and who writes it.

use sha2::Digest;

pub use super::shard_tags::{ShardTags, MAX_SHARDS};
use crate::client_addr::ClientAddr;
use crate::domain::{ArticleId, GroupName, ModAction, Period, Ranking, UserName};
use crate::rate::RateAction;

/// Hash: what the keyspace is. `shards`: a cluster keyspace's count of
/// shards, fixed when it is made (`keyspace.rs`).
pub const KEYSPACE: &str = "keyspace";
pub const KEYSPACE_SHARDS: &str = "shards";

pub const SCORE: &str = "score:";
pub const TIME: &str = "time:";
pub const SLUGS: &str = "slug.to.id";
/// Hash: slug stem → the highest numeric suffix handed out for it.
pub const SLUG_SUFFIXES: &str = "slug:last-suffix";
pub const KARMA: &str = "karma:";
pub const SCORE_CHANNEL: &str = "votegraph:score-changed";
pub const POSTED_CHANNEL: &str = "votegraph:article-posted";
/// The SHA-256 of a token whose session ended.
pub const SESSION_ENDED_CHANNEL: &str = "votegraph:session-ended";

/// Seconds during which an article can be voted on (book: one week).
pub const VOTING_WINDOW_SECS: u64 = 7 * 24 * 60 * 60;
/// Score points one upvote is worth (book: 86,400 s / 200 votes).
pub const VOTE_SCORE: f64 = 432.0;
/// How long a group ranking built by ZINTERSTORE is cached (book: 60 s).
pub const GROUP_CACHE_SECS: u64 = 60;
pub const SESSION_TTL_SECS: u64 = 30 * 24 * 60 * 60;

/// The counter `INCR`ed for a new article's id, spelled like
/// [`ARTICLE_PREFIX`], as the book does.
pub const ARTICLE_IDS: &str = "article:";
/// Of an article's hash, which is also its member in every set.
pub const ARTICLE_PREFIX: &str = "article:";
pub const ARTICLE_GROUPS_SUFFIX: &str = ":groups";
pub const VOTED_PREFIX: &str = "voted:";
pub const DOWNVOTED_PREFIX: &str = "downvoted:";
pub const GROUP_PREFIX: &str = "group:";
/// Of a user's hash, which is also the user's member in the voted sets,
/// `karma:` and an article's `poster` field.
pub const USER_PREFIX: &str = "user:";
pub const USER_ARTICLES_SCORE_SUFFIX: &str = ":articles:score";
pub const USER_ARTICLES_TIME_SUFFIX: &str = ":articles:time";
pub const USER_VOTES_SUFFIX: &str = ":votes";
/// After a user's member: the cluster layout's votes of theirs applied
/// to their index before their outbox entries were drained.
pub const USER_VOTES_AHEAD_SUFFIX: &str = ":votes:ahead";
pub const CLIENT_PREFIX: &str = "client:";
pub const SESSION_PREFIX: &str = "session:";

/// Where keys live: the book's keyspace on one primary, or the cluster
/// layout, where every key carries the hash tag of one of its shards,
/// whose count the keyspace records (`keyspace.rs`). An article's keys
/// share its shard, and so do a user's, so each script runs on one shard;
/// site-wide indexes are split in one slice per shard, which reads merge
/// (docs/keyspace.md).
#[derive(Clone, Copy, Debug, Default)]
pub enum Layout {
    #[default]
    Single,
    Cluster(&'static ShardTags),
}

impl PartialEq for Layout {
    fn eq(&self, other: &Self) -> bool {
        self.shard_count() == other.shard_count() && self.is_cluster() == other.is_cluster()
    }
}

impl Eq for Layout {}

/// One shard of the cluster layout (always 0 on one primary).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard(pub usize);

/// The shards of a new cluster keyspace: spread evenly over 3, 4, 6 and
/// 12 primaries.
pub const DEFAULT_SHARDS: u16 = 12;

/// The shards of a cluster keyspace that records no count: the layout's
/// only count before it could be chosen.
pub const UNRECORDED_SHARDS: u16 = 6;

impl Layout {
    /// The cluster layout with `shards` shards (`1..=MAX_SHARDS`).
    pub fn cluster(shards: u16) -> Self {
        Layout::Cluster(ShardTags::of(shards))
    }

    pub fn is_cluster(self) -> bool {
        matches!(self, Layout::Cluster(_))
    }

    pub fn shard_count(self) -> usize {
        match self {
            Layout::Single => 1,
            Layout::Cluster(tags) => tags.count(),
        }
    }

    /// Every shard, each holding one slice of the site-wide indexes.
    pub fn shards(self) -> impl Iterator<Item = Shard> {
        (0..self.shard_count()).map(Shard)
    }

    /// The prefix that places a key on `shard`: empty on one primary.
    pub fn tag(self, shard: Shard) -> &'static str {
        match self {
            Layout::Single => "",
            Layout::Cluster(tags) => tags.tag(shard.0),
        }
    }

    /// `key` on `shard`.
    pub fn on(self, shard: Shard, key: impl Into<String>) -> String {
        let key = key.into();
        match self {
            Layout::Single => key,
            Layout::Cluster(_) => format!("{}{key}", self.tag(shard)),
        }
    }

    /// The keys of `shard`.
    pub fn at(self, shard: Shard) -> At {
        At {
            layout: self,
            shard,
        }
    }

    /// Ids are handed out per shard (`id = n × shards + shard`), so an
    /// article's shard is its id's remainder.
    pub fn of_article(self, id: ArticleId) -> Shard {
        self.spread(id.0)
    }

    /// A user's shard comes from the folded name, so the folded-name
    /// index's slice that guards the name is on the account's shard.
    pub fn of_user(self, name: &UserName) -> Shard {
        self.spread(digest(name.folded().as_str()))
    }

    /// Sessions are made on their user's shard (see `auth::new_token_for`).
    pub fn of_session(self, token_hash: &str) -> Shard {
        self.spread(digest(token_hash))
    }

    /// A slug is claimed on its own shard, so no two articles get it; a
    /// new article goes to its stem's shard, where the post script claims
    /// the stem or a suffixed form on the same shard (`lua/post.lua`,
    /// whose `slug_shard` computes this too).
    pub fn of_slug(self, slug: &str) -> Shard {
        let hash = slug
            .bytes()
            .fold(0u64, |h, b| (h * 31 + u64::from(b)) % 1_000_003);
        self.spread(hash)
    }

    /// A group's size in the directory lives on the group's shard.
    pub fn of_group(self, name: &str) -> Shard {
        self.spread(digest(name))
    }

    pub fn of_client(self, addr: ClientAddr) -> Shard {
        self.spread(digest(&addr.to_string()))
    }

    /// Where what belongs to the whole site lives.
    pub fn site(self) -> Shard {
        Shard(0)
    }

    fn spread(self, n: u64) -> Shard {
        Shard((n % self.shard_count() as u64) as usize)
    }
}

/// One shard's keys: a script's, which all share its hash tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    pub layout: Layout,
    pub shard: Shard,
}

impl At {
    /// The book's keyspace, where the deriver and the sweep work.
    pub const SINGLE: At = At {
        layout: Layout::Single,
        shard: Shard(0),
    };

    /// `key` on this shard.
    pub fn key(self, key: impl Into<String>) -> String {
        self.layout.on(self.shard, key)
    }

    /// What places a key built in Lua from a member on this shard.
    pub fn tag(self) -> &'static str {
        self.layout.tag(self.shard)
    }
}

fn digest(text: &str) -> u64 {
    let d = sha2::Sha256::digest(text.as_bytes());
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

pub fn article(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}")
}

/// The article an `article:<id>` member stands for; other members are
/// ignored.
pub fn article_id(member: &str) -> Option<ArticleId> {
    // In the cluster layout a member is its key, behind its shard's tag.
    let member = member
        .strip_prefix('{')
        .and_then(|m| m.split_once('}'))
        .map_or(member, |(_, key)| key);
    member
        .strip_prefix(ARTICLE_PREFIX)
        .and_then(|n| n.parse().ok())
        .map(ArticleId)
}

pub fn article_groups(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}{ARTICLE_GROUPS_SUFFIX}")
}

pub fn group(name: &GroupName) -> String {
    format!("{GROUP_PREFIX}{}", name.as_str())
}

/// `score:<name>` / `time:<name>`: a group's cached ranking (book).
pub fn group_ranking(name: &GroupName, ranking: Ranking) -> String {
    format!("{}{}", ranking_key(ranking), name.as_str())
}

/// `group:<name>:indexed`: the group's mirror, the articles whose group
/// lists name it (see `derive_group.lua`).
pub fn group_indexed(name: &GroupName) -> String {
    format!("{GROUP_PREFIX}{}{GROUP_INDEXED_SUFFIX}", name.as_str())
}

pub const GROUP_INDEXED_SUFFIX: &str = ":indexed";

/// A group's cached rankings, which the deriver drops when the group's
/// articles change.
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
    /// `voted:<id>` or `downvoted:<id>`.
    Article(ArticleId),
    /// `group:<name>`.
    Group(GroupName),
    /// `time:` or `score:` as a whole (deleted, restored or renamed).
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

/// As [`touched`], for a keyspace notification of `event` on `key`, except
/// that `time:` and `score:` count only when replaced as a whole: with `z`
/// in `notify-keyspace-events`, every vote's member write is notified too,
/// and that is followed through its voted set.
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
/// database `db`.
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

pub fn user(name: &str) -> String {
    format!("{USER_PREFIX}{name}")
}

pub fn voted(id: ArticleId) -> String {
    format!("{VOTED_PREFIX}{id}")
}

pub fn downvoted(id: ArticleId) -> String {
    format!("{DOWNVOTED_PREFIX}{id}")
}

pub fn user_articles(name: &str, ranking: Ranking) -> String {
    format!("{USER_PREFIX}{name}{}", user_articles_suffix(ranking))
}

pub fn user_votes(name: &str) -> String {
    format!("{USER_PREFIX}{name}{USER_VOTES_SUFFIX}")
}

/// `user:<name>:votes:ahead`: hash article → the id of the outbox entry
/// last applied to the user's index before the drain reached it (the
/// cluster layout, see `outbox.rs`).
pub fn user_votes_ahead(name: &str) -> String {
    format!("{USER_PREFIX}{name}{USER_VOTES_AHEAD_SUFFIX}")
}

/// Hash: a user name folded (see `UserName::folded`) → the account's name.
pub const USERS_BY_FOLDED_NAME: &str = "users:by-folded-name";

/// Set once [`USERS_BY_FOLDED_NAME`] holds every account; sign-ups wait
/// for it, so no case twin slips in while it is built.
pub const NAMES_INDEX_BUILT: &str = "index:user-names:built";

/// `user:<name>:posted:<sha256 hex of the link>`.
pub fn user_posted(name: &str, link: &str) -> String {
    let digest = hex::encode(sha2::Sha256::digest(link.as_bytes()));
    format!("{USER_PREFIX}{name}:posted:{digest}")
}

pub fn login_attempts(name: &str) -> String {
    format!("{USER_PREFIX}{name}:login-attempts")
}

pub fn article_viewers(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}:viewers")
}

/// An anonymous viewer's member, and the prefix of its counters.
pub fn client(addr: ClientAddr) -> String {
    format!("{CLIENT_PREFIX}{addr}")
}

pub fn user_rate(name: &str, action: RateAction) -> String {
    format!("{USER_PREFIX}{name}{}", user_rate_suffix(action))
}

pub fn user_rate_suffix(action: RateAction) -> String {
    format!(":rate:{}", action.as_str())
}

pub fn client_rate(addr: ClientAddr, action: RateAction) -> String {
    format!("{CLIENT_PREFIX}{addr}:rate:{}", action.as_str())
}

pub fn site_rate(action: RateAction) -> String {
    format!("rate:site:{}", action.as_str())
}

/// The member standing for a user in the voted sets, `poster` fields and
/// `karma:`.
pub fn member(name: &UserName) -> String {
    user(name.as_str())
}

pub fn session(token_hash: &str) -> String {
    format!("{SESSION_PREFIX}{token_hash}")
}

/// `score:` or `time:`, also the prefix of a group's cached ranking
/// (`score:<group>`), as the book names it.
pub fn ranking_key(ranking: Ranking) -> &'static str {
    match ranking {
        Ranking::Score => SCORE,
        Ranking::Time => TIME,
    }
}

pub fn user_articles_suffix(ranking: Ranking) -> &'static str {
    match ranking {
        Ranking::Score => USER_ARTICLES_SCORE_SUFFIX,
        Ranking::Time => USER_ARTICLES_TIME_SUFFIX,
    }
}

pub const TOP_PREFIX: &str = "top:";
pub const GROUP_TOP_INFIX: &str = ":top:";
pub const USER_TOP_INFIX: &str = ":articles:top:";
/// A net-vote ranking's score: net votes × 2^32 + the post time in whole
/// seconds, so one `ZREVRANGE` ranks by net votes, then newest first, and
/// the post time is read back from the score (the period filter).
pub const TOP_STEP: f64 = 4_294_967_296.0;

pub fn top(period: Period) -> String {
    format!("{TOP_PREFIX}{}", period.name())
}

pub fn group_top(name: &GroupName, period: Period) -> String {
    format!(
        "{GROUP_PREFIX}{}{GROUP_TOP_INFIX}{}",
        name.as_str(),
        period.name()
    )
}

pub fn user_top(name: &str, period: Period) -> String {
    format!("{USER_PREFIX}{name}{USER_TOP_INFIX}{}", period.name())
}

pub const CACHED_SUFFIX: &str = ":cached";

/// Present while one of the group's `TOP_*` rankings may be cached, so a
/// vote tests one name for the group instead of five.
pub fn group_cached(name: &GroupName) -> String {
    format!("{GROUP_PREFIX}{}{CACHED_SUFFIX}", name.as_str())
}

/// The same for a user's `TOP_*` and score rankings.
pub fn user_cached(name: &str) -> String {
    format!("{USER_PREFIX}{name}{CACHED_SUFFIX}")
}

/// Stream: effects of a shard's writes on other shards (karma, group
/// sizes), applied once each by `outbox.rs` (the cluster layout only).
pub const OUTBOX: &str = "outbox";

/// Hash: source shard → the last of its outbox entries applied here.
pub const OUTBOX_APPLIED: &str = "outbox:applied";

/// Hash period → the post time up to which `top:<period>` was pruned.
pub const TOP_PRUNED: &str = "index:top:pruned";

/// Hash: where the sweep through every article and group set goes on,
/// shared by all instances.
pub const SWEEP: &str = "index:sweep";

/// A round of the sweep, leased to the instance that sets it.
pub const SWEEP_LEASE: &str = "index:sweep:lease";

/// Sorted set group name → minus its number of articles: largest first,
/// and by name among equals, in one `ZRANGE`.
pub const GROUPS_BY_SIZE: &str = "groups:by-size";

pub fn document(sha256_hex: &str) -> String {
    format!("document:{sha256_hex}")
}

/// Sorted set `document:<sha256>` → registration time, oldest first.
/// Members are whole key names, so the script deletes them as they are.
pub const DOCUMENTS: &str = "document:registered";

// Moderation (docs/keyspace.md says what each holds). In the cluster
// layout the queue, the admins and the log are split in one slice per
// shard: an article's on its shard, a user's on theirs.
/// Pub/sub channel of articles taken out or put back, bans and roles.
pub const MODERATED_CHANNEL: &str = "votegraph:moderated";
/// Sorted set `article:<id>` → flags: the moderators' queue.
pub const MODERATION_QUEUE: &str = "moderation:queue";
/// Set of the admins' names.
pub const ADMINS: &str = "users:admins";
/// The cluster layout's last admin's guard (see `moderation.rs`): on
/// each shard, the newest guard number that counted its admins; on the
/// site's shard, the last number handed out.
pub const ADMINS_GUARD: &str = "users:admins:guard";
pub const ADMINS_GUARD_LAST_ID: &str = "users:admins:guard:last-id";
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

/// `article:<id>:hiding-flaggers`: set of the `user:<name>` whose flag on
/// the article counts toward hiding it.
pub fn article_hiding_flaggers(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}:hiding-flaggers")
}

/// `article:<id>:cleared-flaggers`: set of the `user:<name>` whose flags
/// on the article a restore cleared; theirs never count toward hiding it.
pub fn article_cleared_flaggers(id: ArticleId) -> String {
    format!("{ARTICLE_PREFIX}{id}:cleared-flaggers")
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
    fn each_shard_tag_lies_in_its_share_of_the_slots() {
        for count in [UNRECORDED_SHARDS, DEFAULT_SHARDS] {
            let cluster = Layout::cluster(count);
            let share = 16_384 / usize::from(count) + 1;
            for shard in cluster.shards() {
                let key = cluster.on(shard, "article:1");
                let slot = usize::from(super::super::shard_tags::key_slot(&key));
                assert_eq!(slot / share, shard.0, "{key}");
            }
        }
        assert_eq!(Layout::Single.on(Shard(3), "article:1"), "article:1");
        assert_eq!(Layout::Single.shards().count(), 1);
    }

    #[test]
    fn an_accounts_keys_share_the_shard_of_its_folded_name() {
        let cluster = Layout::cluster(DEFAULT_SHARDS);
        let count = usize::from(DEFAULT_SHARDS);
        let names = ["alice", "Alice", "ALICE"].map(|n| UserName::parse(n).unwrap());
        let shards: Vec<Shard> = names.iter().map(|n| cluster.of_user(n)).collect();
        assert!(shards.windows(2).all(|w| w[0] == w[1]), "{shards:?}");
        let spread: std::collections::HashSet<Shard> = (0..200)
            .map(|i| cluster.of_user(&UserName::parse(&format!("user{i}")).unwrap()))
            .collect();
        assert_eq!(spread.len(), count);
        let slugs: std::collections::HashSet<Shard> = (0..120)
            .map(|n| cluster.of_slug(&format!("article-{n}")))
            .collect();
        assert_eq!(slugs.len(), count);
        let articles: std::collections::HashSet<Shard> =
            (1..=24).map(|n| cluster.of_article(ArticleId(n))).collect();
        assert_eq!(articles.len(), count);
    }

    #[test]
    fn members_read_back_as_article_ids() {
        assert_eq!(article_id("article:12"), Some(ArticleId(12)));
        assert_eq!(article_id("post:12"), None);
        assert_eq!(article_id("{s0.127}article:12"), Some(ArticleId(12)));
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
        assert_eq!(user_votes_ahead("alice"), "user:alice:votes:ahead");
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
        assert_eq!(article_hiding_flaggers(id), "article:7:hiding-flaggers");
        assert_eq!(article_cleared_flaggers(id), "article:7:cleared-flaggers");
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
