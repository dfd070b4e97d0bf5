//! Moderation: flags, removing and restoring articles, bans and roles,
//! each written with its log entry in one script (`lua/flag.lua`,
//! `lua/moderate_article.lua`, `lua/moderate_user.lua`), pages of the
//! log (`lua/modlog_page.lua`), and the cluster layout's last admin's
//! guard (`lua/next_admins_guard.lua`, `lua/count_admins.lua`).

use std::sync::LazyLock;

use redis::{ScriptInvocation, Value};

use super::library::{GROUP_SIZES, KARMA, MODERATION, RATE_LIMIT};
use super::{karma_or_outbox, or_outbox, seconds, status, top_keys, via_outbox};
use super::{Counted, Lua, ScriptReply};
use crate::domain::{ArticleId, ModAction, Period, Ranking, Role, UserName};
use crate::error::AppResult;
use crate::rate::RateLimit;
use crate::store::keys::{self, At};
use crate::store::shards::Gate;
use crate::store::{value_f64, value_str, Conn, ModerationLimits};

/// Log entries dropped per write at most, when the log is over its bound
/// (more only after `--modlog-max-entries` was lowered).
const TRIM_PER_WRITE: usize = 100;

/// Entries a filtered page of the log reads at most.
const MODLOG_SCAN: usize = 10_000;

/// What a moderation script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModerationReply {
    Done,
    /// Already so: nothing written, nothing logged.
    Same,
    Missing,
    Limited(u64),
    /// A moderator acting on a moderator or an admin.
    Forbidden,
    /// A ban of one's own account.
    OwnAccount,
    /// A ban or demotion of the last admin.
    LastAdmin,
    /// A newer guard counted the admins since this one: count again
    /// (nothing written).
    Recount,
}

impl ScriptReply for ModerationReply {
    fn read(reply: &Value) -> Option<Self> {
        Some(match status(reply)? {
            ("ok", []) => Self::Done,
            ("same", []) => Self::Same,
            ("missing", []) => Self::Missing,
            ("limited", v) => Self::Limited(seconds(v)?),
            ("forbidden", []) => Self::Forbidden,
            ("self", []) => Self::OwnAccount,
            ("last-admin", []) => Self::LastAdmin,
            ("recount", []) => Self::Recount,
            _ => return None,
        })
    }
}

/// Who acts (None: the command line, as an admin) and why, as the log
/// records it.
#[derive(Clone, Copy)]
pub struct Actor<'a> {
    pub name: Option<&'a UserName>,
    pub role: Role,
    pub reason: Option<&'a str>,
    /// The actor's counter's limit; None: not counted.
    pub limit: Option<RateLimit>,
}

/// How a moderation script runs: on one shard, `at` (the article's or
/// the user's), as `actor`, whose counter `rate` is there or was counted
/// already (see `shards.rs`).
pub struct Acting<'a> {
    pub at: At,
    pub limits: ModerationLimits,
    pub actor: &'a Actor<'a>,
    pub rate: Gate,
}

/// What a moderation script acts on.
enum Subject<'a> {
    Article(ArticleId),
    User(&'a str),
}

/// The KEYS and ARGV every moderation script starts with (see
/// `lua/lib/moderation.lua`), all on the script's shard.
fn common(invocation: &mut ScriptInvocation<'_>, run: &Acting<'_>) {
    let (at, actor) = (run.at, run.actor);
    invocation.key(at.key(keys::SCORE)).key(at.key(keys::TIME));
    top_keys(invocation, at);
    invocation
        .key(at.key(or_outbox(at, keys::GROUPS_BY_SIZE)))
        .key(at.key(keys::MODERATION_QUEUE))
        .key(at.key(keys::MODLOG_LAST_ID))
        .key(at.key(keys::MODLOG));
    for arg in [
        at.key(keys::ARTICLE_PREFIX),
        keys::ARTICLE_GROUPS_SUFFIX.into(),
        at.key(keys::GROUP_PREFIX),
        keys::GROUP_INDEXED_SUFFIX.into(),
        at.key(keys::ranking_key(Ranking::Score)),
        at.key(keys::ranking_key(Ranking::Time)),
        keys::GROUP_TOP_INFIX.into(),
        keys::USER_PREFIX.into(),
        keys::USER_ARTICLES_TIME_SUFFIX.into(),
        keys::USER_ARTICLES_SCORE_SUFFIX.into(),
        keys::USER_TOP_INFIX.into(),
        keys::USER_ARTICLES_OUT_SUFFIX.into(),
        at.key(keys::MODLOG_ENTRY_PREFIX),
        at.key(keys::MODLOG_ACTION_PREFIX),
        keys::MODLOG_SUFFIX.into(),
    ] {
        invocation.arg(arg);
    }
    // Each shard keeps its share of the log's bound.
    let shards = at.layout.shards().count();
    invocation
        .arg((run.limits.modlog_max_entries / shards as u64).max(1))
        .arg(keys::MODERATED_CHANNEL)
        .arg(keys::VOTE_SCORE)
        .arg(keys::TOP_STEP);
    for period in Period::ALL {
        invocation.arg(period.name());
    }
    for period in &Period::ALL[..4] {
        invocation.arg(period.secs().unwrap_or_default());
    }
    invocation
        .arg(actor.name.map_or("", UserName::as_str))
        .arg(actor.reason.unwrap_or(""))
        .arg(TRIM_PER_WRITE)
        .arg(at.tag())
        .arg(via_outbox(at))
        .arg(shards)
        .arg(at.shard.0);
}

/// A moderation script's invocation: the [`common`] KEYS and ARGV, then
/// its subject's: KEYS [12] the article or account, [13] its flags or
/// sessions, [14] the actor's counter, [15] `action`'s index, [16] the
/// subject's log; ARGV [36] the article id or user name, [37] `op`, [38]
/// [39] the actor's limit ('0': not counted here), [40] `action`'s name.
fn prepare<'a>(
    lua: &'a Lua<ModerationReply>,
    run: &Acting<'_>,
    subject: Subject<'_>,
    (action, op): (ModAction, &str),
) -> ScriptInvocation<'a> {
    let at = run.at;
    let mut invocation = lua.invocation();
    common(&mut invocation, run);
    let (subject, aux, log, target) = match subject {
        Subject::Article(id) => (
            keys::article(id),
            keys::article_flags(id),
            keys::article_modlog(id),
            id.to_string(),
        ),
        Subject::User(name) => (
            keys::user(name),
            keys::user_sessions(name),
            keys::user_modlog(name),
            name.to_owned(),
        ),
    };
    invocation
        .key(at.key(subject))
        .key(at.key(aux))
        .key(&run.rate.key)
        .key(at.key(keys::modlog_action(action)))
        .key(at.key(log))
        .arg(target)
        .arg(op)
        .arg(run.rate.count)
        .arg(run.rate.window_secs)
        .arg(action.as_str());
    invocation
}

/// A moderation script: the shared functions, then `body`.
fn moderation_script(name: &'static str, body: &str) -> Lua<ModerationReply> {
    Lua::write(name, &[RATE_LIMIT, KARMA, GROUP_SIZES, MODERATION, body])
}

/// Flags an article, or takes the flag back; the flag that brings the
/// flags that may hide it to `--flag-threshold` hides the article
/// (`HIDE_ARTICLE`).
static FLAG: LazyLock<Lua<ModerationReply>> =
    LazyLock::new(|| moderation_script("flag", include_str!("../lua/flag.lua")));

/// The article's flaggers whose flags count toward hiding it, and those
/// whose flags a restore cleared: KEYS [17] and [18] of the article
/// scripts.
fn flaggers(invocation: &mut ScriptInvocation<'_>, at: At, id: ArticleId) {
    invocation
        .key(at.key(keys::article_hiding_flaggers(id)))
        .key(at.key(keys::article_cleared_flaggers(id)));
}

/// Runs the flag script on the article's shard (the actor's name is the
/// flag's); `may_hide`: the actor's account may hide articles (read on its
/// own shard before, see `Store::flag`).
pub async fn flag(
    conn: &mut Conn,
    run: &Acting<'_>,
    id: ArticleId,
    (flagging, may_hide): (bool, bool),
) -> AppResult<ModerationReply> {
    let op = if flagging { "flag" } else { "unflag" };
    let call = (ModAction::HideArticle, op);
    let mut invocation = prepare(&FLAG, run, Subject::Article(id), call);
    flaggers(&mut invocation, run.at, id);
    invocation
        .arg(if run.actor.role.moderates() { "1" } else { "" })
        .arg(run.limits.flag_threshold)
        .arg(if may_hide { "1" } else { "" });
    FLAG.call(&invocation, conn).await
}

/// Removes or restores an article (a restore puts it back with the score
/// it had, gives its poster the karma of the votes cast while it was out,
/// and clears its flags).
static MODERATE_ARTICLE: LazyLock<Lua<ModerationReply>> = LazyLock::new(|| {
    moderation_script(
        "moderate-article",
        include_str!("../lua/moderate_article.lua"),
    )
});

/// Runs the remove (`remove`) or restore script on the article's shard.
pub async fn moderate_article(
    conn: &mut Conn,
    run: &Acting<'_>,
    id: ArticleId,
    remove: bool,
) -> AppResult<ModerationReply> {
    let call = match remove {
        true => (ModAction::RemoveArticle, "remove"),
        false => (ModAction::RestoreArticle, "restore"),
    };
    let lua = &MODERATE_ARTICLE;
    let mut invocation = prepare(lua, run, Subject::Article(id), call);
    flaggers(&mut invocation, run.at, id);
    invocation.key(run.at.key(karma_or_outbox(run.at)));
    lua.call(&invocation, conn).await
}

/// What is done to a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserAction {
    /// Until a Unix second, or for good.
    Ban(Option<u64>),
    Unban,
    SetRole(Role),
}

/// Bans, unbans or sets a role (a ban ends the user's sessions
/// everywhere: see `sessions.rs`).
static MODERATE_USER: LazyLock<Lua<ModerationReply>> =
    LazyLock::new(|| moderation_script("moderate-user", include_str!("../lua/moderate_user.lua")));

/// The last admin's guard of an action that may remove an admin, in the
/// cluster layout: its number, and the admins it counted on the other
/// shards (see `store/moderation.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminsGuard {
    pub number: u64,
    pub elsewhere: u64,
}

/// Where the last admin's guard stands for one run of the user script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminsCheck {
    /// None needed: one primary, where the script counts every admin; an
    /// action that removes no admin; the command line.
    Unneeded,
    /// A cluster's first try, before counting: the script answers
    /// `Recount` if the action would remove an admin.
    Uncounted,
    /// Counted under this guard.
    Counted(AdminsGuard),
}

/// Runs the ban, unban or role script on `name`'s shard, under `check`.
pub async fn moderate_user(
    conn: &mut Conn,
    run: &Acting<'_>,
    name: &UserName,
    action: UserAction,
    check: AdminsCheck,
) -> AppResult<ModerationReply> {
    let (logged, op, value) = match action {
        UserAction::Ban(until) => (ModAction::BanUser, "ban", until.map(|u| u.to_string())),
        UserAction::Unban => (ModAction::UnbanUser, "unban", None),
        UserAction::SetRole(role) => (ModAction::SetRole, "role", Some(role.as_str().into())),
    };
    let subject = Subject::User(name.as_str());
    let mut invocation = prepare(&MODERATE_USER, run, subject, (logged, op));
    let at = run.at;
    invocation
        .key(at.key(keys::ADMINS))
        .key(at.key(keys::ADMINS_GUARD))
        .arg(run.actor.role.as_str())
        .arg(value.unwrap_or_else(|| "forever".to_owned()))
        .arg(at.key(keys::SESSION_PREFIX))
        .arg(keys::SESSION_ENDED_CHANNEL)
        .arg(match check {
            AdminsCheck::Counted(guard) => guard.elsewhere,
            _ => 0,
        })
        .arg(match check {
            AdminsCheck::Unneeded => String::new(),
            AdminsCheck::Uncounted => "?".to_owned(),
            AdminsCheck::Counted(guard) => guard.number.to_string(),
        });
    MODERATE_USER.call(&invocation, conn).await
}

// The guard's numbers are not a user's write: they do not wait for
// replicas, and a failure is the action's, which is not written.
static NEXT_ADMINS_GUARD: LazyLock<Lua<Counted>> = LazyLock::new(|| {
    Lua::new(
        "next-admins-guard",
        &[include_str!("../lua/next_admins_guard.lua")],
    )
});

/// The next number of the last admin's guard, handed out on the site's
/// shard `at`.
pub async fn next_admins_guard(conn: &mut Conn, at: At) -> AppResult<u64> {
    let mut invocation = NEXT_ADMINS_GUARD.invocation();
    invocation.key(at.key(keys::ADMINS_GUARD_LAST_ID));
    Ok(NEXT_ADMINS_GUARD.call(&invocation, conn).await?.0)
}

static COUNT_ADMINS: LazyLock<Lua<Counted>> =
    LazyLock::new(|| Lua::new("count-admins", &[include_str!("../lua/count_admins.lua")]));

/// The admins of shard `at`, counted for the guard numbered `number`.
pub async fn count_admins(conn: &mut Conn, at: At, number: u64) -> AppResult<u64> {
    let mut invocation = COUNT_ADMINS.invocation();
    invocation
        .key(at.key(keys::ADMINS))
        .key(at.key(keys::ADMINS_GUARD))
        .arg(number);
    Ok(COUNT_ADMINS.call(&invocation, conn).await?.0)
}

/// One log entry, as the page script reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModLogRecord {
    pub n: u64,
    /// Unix seconds.
    pub at: f64,
    pub action: ModAction,
    pub reason: Option<String>,
    pub moderator: Option<String>,
    pub article: Option<ArticleId>,
    pub user: Option<String>,
    /// A ban's end, Unix seconds.
    pub until: Option<u64>,
}

/// A page of the log: the entries matching, and up to `first + 1` of them.
#[derive(Debug, Clone, PartialEq)]
pub struct ModLogReply {
    pub total: u64,
    pub entries: Vec<ModLogRecord>,
}

impl ScriptReply for ModLogReply {
    fn read(reply: &Value) -> Option<Self> {
        let Value::Array(parts) = reply else {
            return None;
        };
        let [total, Value::Array(flat)] = parts.as_slice() else {
            return None;
        };
        let text = |v: &Value| value_str(v).map(str::to_owned);
        let entries = flat
            .chunks_exact(8)
            .map(|e| {
                Some(ModLogRecord {
                    n: value_str(&e[0])?.parse().ok()?,
                    at: value_f64(&e[1])?,
                    action: ModAction::parse(value_str(&e[2])?)?,
                    reason: text(&e[3]),
                    moderator: text(&e[4]),
                    article: value_str(&e[5]).and_then(|id| id.parse().ok().map(ArticleId)),
                    user: text(&e[6]),
                    until: value_str(&e[7]).and_then(|u| u.parse().ok()),
                })
            })
            .collect::<Option<_>>()?;
        Some(Self {
            total: value_f64(total)? as u64,
            entries,
        })
    }
}

/// Reads a page of the log, newest first.
static MODLOG_PAGE: LazyLock<Lua<ModLogReply>> =
    LazyLock::new(|| Lua::new("modlog-page", &[include_str!("../lua/modlog_page.lua")]));

/// Which entries a page of the log holds.
#[derive(Debug, Clone, Default)]
pub struct ModLogFilter {
    pub action: Option<ModAction>,
    pub user: Option<String>,
    pub article: Option<ArticleId>,
}

/// Runs the page script on shard `at`: the `first + 1` entries of its
/// slice after entry `after` (from the newest without it) that match
/// `filter`, read from the most selective index (an article's, a user's,
/// an action's, or the whole log).
pub async fn modlog_page(
    conn: &mut Conn,
    at: At,
    filter: &ModLogFilter,
    after: Option<u64>,
    first: usize,
) -> AppResult<ModLogReply> {
    let mut wanted = [
        filter.action.map_or("", ModAction::as_str).to_owned(),
        filter.user.clone().unwrap_or_default(),
        filter.article.map_or(String::new(), |id| id.to_string()),
    ];
    // The index read stands for its own filter.
    let (index, implied) = match filter {
        ModLogFilter {
            article: Some(id), ..
        } => (keys::article_modlog(*id), 2),
        ModLogFilter { user: Some(u), .. } => (keys::user_modlog(u), 1),
        ModLogFilter {
            action: Some(a), ..
        } => (keys::modlog_action(*a), 0),
        _ => (keys::MODLOG.to_owned(), 0),
    };
    wanted[implied].clear();
    let mut invocation = MODLOG_PAGE.invocation();
    invocation
        .key(at.key(index))
        .arg(at.key(keys::MODLOG_ENTRY_PREFIX))
        .arg(first)
        .arg(after.map_or("+inf".to_owned(), |n| n.to_string()))
        .arg(MODLOG_SCAN)
        .arg(&wanted[..]);
    MODLOG_PAGE.call(&invocation, conn).await
}
