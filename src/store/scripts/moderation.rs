//! Moderation: flags, removing and restoring articles, bans and roles,
//! each written with its log entry in one script (`lua/flag.lua`,
//! `lua/moderate_article.lua`, `lua/moderate_user.lua`), and pages of the
//! log (`lua/modlog_page.lua`).

use std::sync::LazyLock;

use redis::{ScriptInvocation, Value};

use super::library::{KARMA, MODERATION, RATE_LIMIT};
use super::{seconds, status, top_keys, Lua, ScriptReply};
use crate::domain::{ArticleId, ModAction, Period, Ranking, Role, UserName};
use crate::error::AppResult;
use crate::rate::{RateAction, RateLimit};
use crate::store::keys::{self, At};
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
    Limited {
        retry_after_secs: u64,
    },
    /// A moderator acting on a moderator or an admin.
    Forbidden,
    /// A ban of one's own account.
    OwnAccount,
    /// A ban or demotion of the last admin.
    LastAdmin,
}

impl ScriptReply for ModerationReply {
    fn read(reply: &Value) -> Option<Self> {
        Some(match status(reply)? {
            ("ok", []) => Self::Done,
            ("same", []) => Self::Same,
            ("missing", []) => Self::Missing,
            ("limited", v) => Self::Limited {
                retry_after_secs: seconds(v)?,
            },
            ("forbidden", []) => Self::Forbidden,
            ("self", []) => Self::OwnAccount,
            ("last-admin", []) => Self::LastAdmin,
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

/// What a moderation script acts on.
enum Subject<'a> {
    Article(ArticleId),
    User(&'a str),
}

/// A moderation script's invocation: the KEYS and ARGV every one starts
/// with (see `lua/lib/moderation.lua`), then its subject's: KEYS [12] the
/// article or account, [13] its flags or sessions, [14] the actor's
/// counter of `counted`, [15] `action`'s index, [16] the subject's log;
/// ARGV [32] the article id or user name, [33] `op`, [34] [35] the actor's
/// limit (empty: not counted), [36] `action`'s name.
fn prepare<'a>(
    lua: &'a Lua<ModerationReply>,
    (limits, actor): (ModerationLimits, &Actor<'_>),
    subject: Subject<'_>,
    (counted, action, op): (RateAction, ModAction, &str),
) -> ScriptInvocation<'a> {
    let mut invocation = lua.invocation();
    invocation.key(keys::SCORE).key(keys::TIME);
    top_keys(&mut invocation, At::SINGLE);
    invocation
        .key(keys::GROUPS_BY_SIZE)
        .key(keys::MODERATION_QUEUE)
        .key(keys::MODLOG_LAST_ID)
        .key(keys::MODLOG);
    for arg in [
        keys::ARTICLE_PREFIX,
        keys::ARTICLE_GROUPS_SUFFIX,
        keys::GROUP_PREFIX,
        keys::GROUP_INDEXED_SUFFIX,
        keys::ranking_key(Ranking::Score),
        keys::ranking_key(Ranking::Time),
        keys::GROUP_TOP_INFIX,
        keys::USER_PREFIX,
        keys::USER_ARTICLES_TIME_SUFFIX,
        keys::USER_ARTICLES_SCORE_SUFFIX,
        keys::USER_TOP_INFIX,
        keys::USER_ARTICLES_OUT_SUFFIX,
        keys::MODLOG_ENTRY_PREFIX,
        keys::MODLOG_ACTION_PREFIX,
        keys::MODLOG_SUFFIX,
    ] {
        invocation.arg(arg);
    }
    invocation
        .arg(limits.modlog_max_entries)
        .arg(keys::MODERATED_CHANNEL)
        .arg(keys::VOTE_SCORE)
        .arg(keys::TOP_STEP);
    for period in Period::ALL {
        invocation.arg(period.name());
    }
    for period in &Period::ALL[..4] {
        invocation.arg(period.secs().unwrap_or_default());
    }
    let actor_name = actor.name.map_or("", UserName::as_str);
    invocation
        .arg(actor_name)
        .arg(actor.reason.unwrap_or(""))
        .arg(TRIM_PER_WRITE);
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
        .key(subject)
        .key(aux)
        .key(keys::user_rate(actor_name, counted))
        .key(keys::modlog_action(action))
        .key(log)
        .arg(target)
        .arg(op);
    match actor.limit {
        Some(limit) => invocation.arg(limit.count()).arg(limit.window_secs()),
        None => invocation.arg("").arg(""),
    };
    invocation.arg(action.as_str());
    invocation
}

/// A moderation script: the shared functions, then `body`.
fn moderation_script(name: &'static str, body: &str) -> Lua<ModerationReply> {
    Lua::write(name, &[RATE_LIMIT, KARMA, MODERATION, body])
}

/// Flags an article, or takes the flag back; the flag that reaches
/// `--flag-threshold` hides the article (`HIDE_ARTICLE`).
static FLAG: LazyLock<Lua<ModerationReply>> =
    LazyLock::new(|| moderation_script("flag", include_str!("../lua/flag.lua")));

/// Runs the flag script as `actor` (whose name and limit it needs).
pub async fn flag(
    conn: &mut Conn,
    limits: ModerationLimits,
    actor: &Actor<'_>,
    id: ArticleId,
    flagging: bool,
) -> AppResult<ModerationReply> {
    let op = if flagging { "flag" } else { "unflag" };
    let call = (RateAction::Flag, ModAction::HideArticle, op);
    let mut invocation = prepare(&FLAG, (limits, actor), Subject::Article(id), call);
    invocation
        .arg(if actor.role.moderates() { "1" } else { "" })
        .arg(limits.flag_threshold);
    FLAG.call(&invocation, conn).await
}

/// Removes or restores an article (a restore puts it back with the score
/// it had and clears its flags).
static MODERATE_ARTICLE: LazyLock<Lua<ModerationReply>> = LazyLock::new(|| {
    moderation_script(
        "moderate-article",
        include_str!("../lua/moderate_article.lua"),
    )
});

/// Runs the remove (`remove`) or restore script as `actor`.
pub async fn moderate_article(
    conn: &mut Conn,
    limits: ModerationLimits,
    actor: &Actor<'_>,
    id: ArticleId,
    remove: bool,
) -> AppResult<ModerationReply> {
    let call = match remove {
        true => (RateAction::Moderate, ModAction::RemoveArticle, "remove"),
        false => (RateAction::Moderate, ModAction::RestoreArticle, "restore"),
    };
    let lua = &MODERATE_ARTICLE;
    let invocation = prepare(lua, (limits, actor), Subject::Article(id), call);
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

/// Bans, unbans or sets a role, the user's sessions rewritten in the same
/// step (a ban ends them everywhere: see `sessions.rs`).
static MODERATE_USER: LazyLock<Lua<ModerationReply>> =
    LazyLock::new(|| moderation_script("moderate-user", include_str!("../lua/moderate_user.lua")));

/// Runs the ban, unban or role script on `name` as `actor`.
pub async fn moderate_user(
    conn: &mut Conn,
    limits: ModerationLimits,
    actor: &Actor<'_>,
    name: &UserName,
    action: UserAction,
) -> AppResult<ModerationReply> {
    let (logged, op, value) = match action {
        UserAction::Ban(until) => (ModAction::BanUser, "ban", until.map(|u| u.to_string())),
        UserAction::Unban => (ModAction::UnbanUser, "unban", None),
        UserAction::SetRole(role) => (ModAction::SetRole, "role", Some(role.as_str().into())),
    };
    let call = (RateAction::Moderate, logged, op);
    let subject = Subject::User(name.as_str());
    let mut invocation = prepare(&MODERATE_USER, (limits, actor), subject, call);
    invocation
        .key(keys::ADMINS)
        .arg(actor.role.as_str())
        .arg(value.unwrap_or_else(|| "forever".to_owned()))
        .arg(keys::SESSION_PREFIX)
        .arg(keys::SESSION_ENDED_CHANNEL);
    MODERATE_USER.call(&invocation, conn).await
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

/// Runs the page script: the `first + 1` entries after entry `after`
/// (from the newest without it) that match `filter`, read from the most
/// selective index (an article's, a user's, an action's, or the whole log).
pub async fn modlog_page(
    conn: &mut Conn,
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
        .key(index)
        .arg(keys::MODLOG_ENTRY_PREFIX)
        .arg(first)
        .arg(after.map_or("+inf".to_owned(), |n| n.to_string()))
        .arg(MODLOG_SCAN)
        .arg(&wanted[..]);
    MODLOG_PAGE.call(&invocation, conn).await
}
