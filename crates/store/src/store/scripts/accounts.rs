//! Accounts: signing up (an account and its first session, case twins
//! refused), indexing existing accounts by their folded names, and counting
//! logIn attempts and starting a session, and reading sessions as their
//! accounts stand, alone or with their user's votes (`lua/sign_up.lua`,
//! `lua/index_names.lua`, `lua/login_attempt.lua`, `lua/log_in.lua`,
//! `lua/session_user.lua`, `lua/sessions_alive.lua`,
//! `lua/session_votes.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::{RATE_LIMIT, SESSION};
use super::{seconds, status, Counted, Lua, ScriptReply};
use crate::domain::Role;
use crate::domain::UserName;
use crate::error::AppResult;
use crate::store::keys::{self, At};
use crate::store::shards::Gate;
use crate::store::value_str;
use crate::store::{Caller, Conn, SessionUser};

// --- sign up ------------------------------------------------------------

/// What the sign-up script answered; a taken name counts against the limit
/// too, which slows down probing for names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignUpReply {
    Limited(u64),
    Taken,
    Created,
    /// The folded-name index is not built yet (the first start).
    Indexing,
}

impl ScriptReply for SignUpReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("limited", v) => Some(Self::Limited(seconds(v)?)),
            ("taken", _) => Some(Self::Taken),
            ("created", _) => Some(Self::Created),
            ("indexing", _) => Some(Self::Indexing),
            _ => None,
        }
    }
}

/// Creates an account and its first session together. A name is taken
/// when its account exists or when another name folds to the same (a case
/// twin); the new name is indexed by its folded form.
static SIGN_UP: LazyLock<Lua<SignUpReply>> = LazyLock::new(|| {
    let parts = [RATE_LIMIT, SESSION, include_str!("../lua/sign_up.lua")];
    Lua::write("sign-up", &parts)
});

/// Runs the sign-up script, counting against the client address' `limit`.
pub async fn sign_up(
    conn: &mut Conn,
    at: At,
    (name, password_hash): (&UserName, &str),
    created: i64,
    token_hash: &str,
    rate: Gate,
) -> AppResult<SignUpReply> {
    let mut invocation = SIGN_UP.invocation();
    invocation
        .key(at.key(keys::user(name.as_str())))
        .key(at.key(keys::session(token_hash)))
        .key(rate.key)
        .key(at.key(keys::USERS_BY_FOLDED_NAME))
        .key(at.key(keys::NAMES_INDEX_BUILT))
        .key(at.key(keys::user_sessions(name.as_str())))
        .arg(name.as_str())
        .arg(password_hash)
        .arg(created)
        .arg(keys::SESSION_TTL_SECS)
        .arg(rate.count)
        .arg(rate.window_secs)
        .arg(name.folded().as_str())
        .arg(token_hash);
    SIGN_UP.call(&invocation, conn).await
}

// --- log in ---------------------------------------------------------------

/// What the log-in script answered: a session, or the ban's end (None:
/// for good).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogInReply {
    Started,
    Banned { until: Option<u64> },
}

impl ScriptReply for LogInReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("ok", _) => Some(Self::Started),
            ("banned", [until]) => Some(Self::Banned {
                until: value_str(until)?.parse().ok(),
            }),
            _ => None,
        }
    }
}

/// Starts a session after a successful logIn, unless the account is
/// banned (checked in the same step, so a ban cannot slip between them).
static LOG_IN: LazyLock<Lua<LogInReply>> =
    LazyLock::new(|| Lua::write("log-in", &[SESSION, include_str!("../lua/log_in.lua")]));

/// Runs the log-in script for `name`'s new session `token_hash`.
pub async fn log_in(
    conn: &mut Conn,
    at: At,
    name: &UserName,
    token_hash: &str,
) -> AppResult<LogInReply> {
    let mut invocation = LOG_IN.invocation();
    invocation
        .key(at.key(keys::session(token_hash)))
        .key(at.key(keys::user(name.as_str())))
        .key(at.key(keys::user_sessions(name.as_str())))
        .key(at.key(keys::login_attempts(name.folded().as_str())))
        .arg(name.as_str())
        .arg(keys::SESSION_TTL_SECS)
        .arg(token_hash);
    LOG_IN.call(&invocation, conn).await
}

// --- log out -------------------------------------------------------------

/// Revokes a session and publishes its end, in one step.
static END_SESSION: LazyLock<Lua<Counted>> =
    LazyLock::new(|| Lua::write("end-session", &[include_str!("../lua/end_session.lua")]));

/// Runs the end-session script on `session` (a placed key); 1 when a
/// session was revoked.
pub async fn end_session(conn: &mut Conn, session: String, token_hash: &str) -> AppResult<u64> {
    let mut invocation = END_SESSION.invocation();
    invocation
        .key(session)
        .arg(keys::SESSION_ENDED_CHANNEL)
        .arg(token_hash);
    Ok(END_SESSION.call(&invocation, conn).await?.0)
}

// --- the folded-name index ------------------------------------------------

/// Indexes existing accounts by their folded names: each folded name goes
/// to its oldest account (by `created`, then by name), so that of two case
/// twins made before names were folded, the first keeps the name in other
/// cases.
static INDEX_NAMES: LazyLock<Lua<Counted>> =
    LazyLock::new(|| Lua::new("index-names", &[include_str!("../lua/index_names.lua")]));

/// Indexes `names` (existing accounts) by their folded form.
pub async fn index_names(conn: &mut Conn, names: &[UserName]) -> AppResult<u64> {
    let mut invocation = INDEX_NAMES.invocation();
    invocation
        .key(keys::USERS_BY_FOLDED_NAME)
        .arg(keys::USER_PREFIX);
    for name in names {
        invocation.arg(name.as_str()).arg(name.folded().as_str());
    }
    Ok(INDEX_NAMES.call(&invocation, conn).await?.0)
}

// --- login attempt ------------------------------------------------------

/// What the login-attempt script answered: the attempt may go ahead, or
/// which limit refused it and the seconds until its window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginAttemptReply {
    Allowed,
    AddressLimited(u64),
    NameLimited(u64),
}

impl ScriptReply for LoginAttemptReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("ok", _) => Some(Self::Allowed),
            ("address", v) => Some(Self::AddressLimited(seconds(v)?)),
            ("name", v) => Some(Self::NameLimited(seconds(v)?)),
            _ => None,
        }
    }
}

/// Counts one logIn attempt before its password is checked, so concurrent
/// guesses cannot slip past the limits while the hash is verified. An
/// attempt refused by its address is not counted against the name: it
/// never reached a password check.
static LOGIN_ATTEMPT: LazyLock<Lua<LoginAttemptReply>> = LazyLock::new(|| {
    Lua::new(
        "login-attempt",
        &[RATE_LIMIT, include_str!("../lua/login_attempt.lua")],
    )
});

/// Runs the login-attempt script with the name's counter and limit and the
/// address' counter and limit.
pub async fn login_attempt(
    conn: &mut Conn,
    at: At,
    name: &UserName,
    (name_attempts, name_window_secs): (u32, u64),
    address: Gate,
) -> AppResult<LoginAttemptReply> {
    let mut invocation = LOGIN_ATTEMPT.invocation();
    invocation
        .key(at.key(keys::login_attempts(name.folded().as_str())))
        .key(address.key)
        .arg(name_attempts)
        .arg(name_window_secs)
        .arg(address.count)
        .arg(address.window_secs);
    LOGIN_ATTEMPT.call(&invocation, conn).await
}

// --- who a session is -----------------------------------------------------

/// `session_user`'s answer (see `lua/lib/session.lua`): `{'active', name,
/// role}` or `{'banned', name, end}`.
fn read_session_user(reply: &Value) -> Option<SessionUser> {
    let (status, [name, value]) = status(reply)? else {
        return None;
    };
    let name = UserName::from_stored(value_str(name)?.to_owned());
    match status {
        "active" => Some(SessionUser::Active(Caller {
            name,
            role: Role::parse(value_str(value)?)?,
        })),
        "banned" => Some(SessionUser::Banned {
            name,
            until: value_str(value)?.parse().ok(),
        }),
        _ => None,
    }
}

/// Who a session is, as its account stands now; None without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundSession(pub Option<SessionUser>);

impl ScriptReply for FoundSession {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("none", []) => Some(Self(None)),
            _ => read_session_user(reply).map(|user| Self(Some(user))),
        }
    }
}

static SESSION_USER: LazyLock<Lua<FoundSession>> = LazyLock::new(|| {
    let parts = [SESSION, include_str!("../lua/session_user.lua")];
    Lua::read_only("session-user", &parts)
});

/// Reads the session `session` (a key on `at`) with its account's role
/// and ban.
pub async fn session_user(conn: &mut Conn, at: At, session: String) -> AppResult<FoundSession> {
    let mut invocation = SESSION_USER.invocation();
    invocation.key(session).arg(at.key(keys::USER_PREFIX));
    SESSION_USER.call(&invocation, conn).await
}

/// For each session checked, in order, whether it still lets its user in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliveSessions(pub Vec<bool>);

impl ScriptReply for AliveSessions {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("alive", flags) => flags
                .iter()
                .map(|flag| match flag {
                    Value::Int(n) => Some(*n == 1),
                    _ => None,
                })
                .collect::<Option<_>>()
                .map(Self),
            _ => None,
        }
    }
}

static SESSIONS_ALIVE: LazyLock<Lua<AliveSessions>> = LazyLock::new(|| {
    let parts = [SESSION, include_str!("../lua/sessions_alive.lua")];
    Lua::read_only("sessions-alive", &parts)
});

/// Checks `sessions`, keys all on `at`.
pub async fn sessions_alive(
    conn: &mut Conn,
    at: At,
    sessions: &[String],
) -> AppResult<AliveSessions> {
    let mut invocation = SESSIONS_ALIVE.invocation();
    for session in sessions {
        invocation.key(session);
    }
    invocation.arg(at.key(keys::USER_PREFIX));
    SESSIONS_ALIVE.call(&invocation, conn).await
}

// --- a session and its user's votes -------------------------------------

/// What the session-votes script answered: no session, or who it is and
/// the reply of `ZMSCORE` of its user's vote index.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionVotes {
    None,
    Session(SessionUser, Value),
}

impl ScriptReply for SessionVotes {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("none", []) => Some(Self::None),
            ("session", [user, votes]) => {
                Some(Self::Session(read_session_user(user)?, votes.clone()))
            }
            _ => None,
        }
    }
}

static SESSION_VOTES: LazyLock<Lua<SessionVotes>> = LazyLock::new(|| {
    let parts = [SESSION, include_str!("../lua/session_votes.lua")];
    Lua::read_only("session-votes", &parts)
});

/// Reads the session `session` (a key on `at`) and its user's votes on
/// `members`.
pub async fn session_votes(
    conn: &mut Conn,
    at: At,
    session: String,
    members: &[String],
) -> AppResult<SessionVotes> {
    let mut invocation = SESSION_VOTES.invocation();
    invocation
        .key(session)
        .arg(at.key(keys::USER_PREFIX))
        .arg(keys::USER_VOTES_SUFFIX)
        .arg(members);
    SESSION_VOTES.call(&invocation, conn).await
}
