//! A logged-in page's reader and their votes on it, in one step
//! (`lua/session_votes.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::{status, value_str, Lua, ScriptReply};
use crate::error::AppResult;
use crate::store::keys::{self, At};
use crate::store::Conn;

/// What the script answered: no session, or its value and the reply of
/// `ZMSCORE` of its user's vote index.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionVotes {
    None,
    Session(String, Value),
}

impl ScriptReply for SessionVotes {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("none", []) => Some(Self::None),
            ("session", [session, votes]) => {
                Some(Self::Session(value_str(session)?.to_owned(), votes.clone()))
            }
            _ => None,
        }
    }
}

static SESSION_VOTES: LazyLock<Lua<SessionVotes>> =
    LazyLock::new(|| Lua::new("session-votes", &[include_str!("../lua/session_votes.lua")]));

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
