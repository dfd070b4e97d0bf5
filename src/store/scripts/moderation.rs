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
use crate::store::keys;
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

/// Who acts (None: the command line) and why, as the log records it.
#[derive(Clone, Copy)]
pub struct Actor<'a> {
    pub name: Option<&'a UserName>,
    pub reason: Option<&'a str>,
    /// The actor's counter's limit; None: not counted.
    pub limit: Option<RateLimit>,
}

impl Actor<'_> {
    /// Its counter of `action` (a key is passed even when not counted).
    fn counter(&self, action: RateAction) -> String {
        keys::user_rate(self.name.map_or("", UserName::as_str), action)
    }

    fn limit_args(&self, invocation: &mut ScriptInvocation<'_>) {
        match self.limit {
            Some(limit) => invocation.arg(limit.count()).arg(limit.window_secs()),
            None => invocation.arg("").arg(""),
        };
    }
}

/// The KEYS and ARGV every moderation script starts with (see
/// `lua/lib/moderation.lua`).
fn common(invocation: &mut ScriptInvocation<'_>, limits: ModerationLimits, actor: &Actor<'_>) {
    invocation.key(keys::SCORE).key(keys::TIME);
    top_keys(invocation);
    invocation
        .key(keys::GROUPS_BY_SIZE)
        .key(keys::MODERATION_QUEUE)
        .key(keys::MODLOG_LAST_ID)
        .key(keys::MODLOG);
    invocation
        .arg(keys::ARTICLE_PREFIX)
        .arg(keys::ARTICLE_GROUPS_SUFFIX)
        .arg(keys::GROUP_PREFIX)
        .arg(keys::GROUP_INDEXED_SUFFIX)
        .arg(keys::ranking_key(Ranking::Score))
        .arg(keys::ranking_key(Ranking::Time))
        .arg(keys::GROUP_TOP_INFIX)
        .arg(keys::USER_PREFIX)
        .arg(keys::USER_ARTICLES_TIME_SUFFIX)
        .arg(keys::USER_ARTICLES_SCORE_SUFFIX)
        .arg(keys::USER_TOP_INFIX)
        .arg(keys::USER_ARTICLES_OUT_SUFFIX)
        .arg(keys::MODLOG_ENTRY_PREFIX)
        .arg(keys::MODLOG_ACTION_PREFIX)
        .arg(keys::MODLOG_SUFFIX)
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
    invocation
        .arg(actor.name.map_or("", UserName::as_str))
        .arg(actor.reason.unwrap_or(""))
        .arg(TRIM_PER_WRITE);
}

/// Flags an article, or takes the flag back; the flag that reaches
/// `--flag-threshold` hides the article (`HIDE_ARTICLE`).
static FLAG: LazyLock<Lua<ModerationReply>> = LazyLock::new(|| {
    Lua::write(
        "flag",
        &[
            RATE_LIMIT,
            KARMA,
            MODERATION,
            include_str!("../lua/flag.lua"),
        ],
    )
});

/// Runs the flag script as `actor` (whose name and limit it needs).
pub async fn flag(
    conn: &mut Conn,
    limits: ModerationLimits,
    actor: &Actor<'_>,
    id: ArticleId,
    flagging: bool,
    moderates: bool,
) -> AppResult<ModerationReply> {
    let mut invocation = FLAG.invocation();
    common(&mut invocation, limits, actor);
    invocation
        .key(keys::article(id))
        .key(keys::article_flags(id))
        .key(actor.counter(RateAction::Flag))
        .key(keys::modlog_action(ModAction::HideArticle))
        .key(keys::article_modlog(id))
        .arg(id.0)
        .arg(if flagging { "flag" } else { "unflag" });
    actor.limit_args(&mut invocation);
    invocation
        .arg(limits.flag_threshold)
        .arg(ModAction::HideArticle.as_str())
        .arg(if moderates { "1" } else { "" });
    FLAG.call(&invocation, conn).await
}

/// Removes or restores an article (a restore puts it back with the score
/// it had and clears its flags).
static MODERATE_ARTICLE: LazyLock<Lua<ModerationReply>> = LazyLock::new(|| {
    Lua::write(
        "moderate-article",
        &[
            RATE_LIMIT,
            KARMA,
            MODERATION,
            include_str!("../lua/moderate_article.lua"),
        ],
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
    let action = if remove {
        ModAction::RemoveArticle
    } else {
        ModAction::RestoreArticle
    };
    let mut invocation = MODERATE_ARTICLE.invocation();
    common(&mut invocation, limits, actor);
    invocation
        .key(keys::article(id))
        .key(keys::article_flags(id))
        .key(actor.counter(RateAction::Moderate))
        .key(keys::modlog_action(action))
        .key(keys::article_modlog(id))
        .arg(id.0)
        .arg(if remove { "remove" } else { "restore" });
    actor.limit_args(&mut invocation);
    invocation.arg(action.as_str());
    MODERATE_ARTICLE.call(&invocation, conn).await
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
static MODERATE_USER: LazyLock<Lua<ModerationReply>> = LazyLock::new(|| {
    Lua::write(
        "moderate-user",
        &[
            RATE_LIMIT,
            KARMA,
            MODERATION,
            include_str!("../lua/moderate_user.lua"),
        ],
    )
});

/// Runs the ban, unban or role script on `name` as `actor`, whose role
/// is `role` (an admin's, for the command line).
pub async fn moderate_user(
    conn: &mut Conn,
    limits: ModerationLimits,
    (actor, role): (&Actor<'_>, Role),
    name: &UserName,
    action: UserAction,
) -> AppResult<ModerationReply> {
    let (logged, op, value) = match action {
        UserAction::Ban(until) => (
            ModAction::BanUser,
            "ban",
            until.map_or("forever".to_owned(), |u| u.to_string()),
        ),
        UserAction::Unban => (ModAction::UnbanUser, "unban", String::new()),
        UserAction::SetRole(role) => (ModAction::SetRole, "role", role.as_str().to_owned()),
    };
    let name = name.as_str();
    let mut invocation = MODERATE_USER.invocation();
    common(&mut invocation, limits, actor);
    invocation
        .key(keys::user(name))
        .key(keys::user_sessions(name))
        .key(keys::ADMINS)
        .key(actor.counter(RateAction::Moderate))
        .key(keys::modlog_action(logged))
        .key(keys::user_modlog(name))
        .arg(name)
        .arg(op);
    actor.limit_args(&mut invocation);
    invocation
        .arg(logged.as_str())
        .arg(role.as_str())
        .arg(value)
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
    let (index, action, user, article) = match filter {
        ModLogFilter {
            article: Some(id), ..
        } => (
            keys::article_modlog(*id),
            filter.action,
            filter.user.as_deref(),
            None,
        ),
        ModLogFilter { user: Some(u), .. } => (keys::user_modlog(u), filter.action, None, None),
        ModLogFilter {
            action: Some(a), ..
        } => (keys::modlog_action(*a), None, None, None),
        _ => (keys::MODLOG.to_owned(), None, None, None),
    };
    let mut invocation = MODLOG_PAGE.invocation();
    invocation
        .key(index)
        .arg(keys::MODLOG_ENTRY_PREFIX)
        .arg(first)
        .arg(after.map_or("+inf".to_owned(), |n| n.to_string()))
        .arg(MODLOG_SCAN)
        .arg(action.map_or("", ModAction::as_str))
        .arg(user.unwrap_or(""))
        .arg(article.map_or(String::new(), |id: ArticleId| id.to_string()));
    MODLOG_PAGE.call(&invocation, conn).await
}
