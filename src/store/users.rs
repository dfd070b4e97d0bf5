//! Accounts and login sessions.

use std::collections::HashMap;

use redis::Value;

use super::keys;
use super::scripts;
use super::{value_f64, value_str, Store};
use crate::domain::UserName;
use crate::error::AppResult;

/// How many logIn attempts one user name gets per window. Counting by name
/// stops password guessing against an account however many addresses the
/// guesses come from; the price is that someone who knows a name can keep
/// its owner from logging in for a window, which existing sessions survive.
#[derive(Debug, Clone, Copy)]
pub struct LoginLimit {
    pub attempts: u32,
    pub window_secs: u64,
}

impl Store {
    /// Creates an account together with its first session. Returns false,
    /// writing nothing, when the name is taken.
    pub async fn create_user(
        &self,
        name: &UserName,
        password_hash: &str,
        token_hash: &str,
    ) -> AppResult<bool> {
        let created = chrono::Utc::now().timestamp();
        let mut conn = self.conn().await?;
        let created_ok: i64 = scripts::SIGN_UP
            .key(keys::user(name.as_str()))
            .key(keys::session(token_hash))
            .arg(name.as_str())
            .arg(password_hash)
            .arg(created)
            .arg(keys::SESSION_TTL_SECS)
            .invoke_async(&mut conn)
            .await?;
        Ok(created_ok == 1)
    }

    /// The stored argon2 hash of a user's password, if the user exists.
    pub async fn password_hash(&self, name: &UserName) -> AppResult<Option<String>> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("HGET")
            .arg(keys::user(name.as_str()))
            .arg("password")
            .query_async(&mut conn)
            .await?)
    }

    /// Counts a logIn attempt for `name`; `Some(seconds)` when the name has
    /// used up its `limit` attempts and must wait that long.
    pub async fn login_attempt(
        &self,
        name: &UserName,
        limit: LoginLimit,
    ) -> AppResult<Option<u64>> {
        let mut conn = self.conn().await?;
        let wait: u64 = scripts::LOGIN_ATTEMPT
            .key(keys::login_attempts(name.as_str()))
            .arg(limit.attempts)
            .arg(limit.window_secs)
            .invoke_async(&mut conn)
            .await?;
        Ok((wait > 0).then_some(wait))
    }

    /// Starts a session after a successful logIn, forgetting the name's
    /// counted attempts in the same step.
    pub async fn create_session(&self, token_hash: &str, name: &UserName) -> AppResult<()> {
        let mut conn = self.conn().await?;
        let () = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(keys::session(token_hash))
            .arg(name.as_str())
            .arg("EX")
            .arg(keys::SESSION_TTL_SECS)
            .ignore()
            .cmd("DEL")
            .arg(keys::login_attempts(name.as_str()))
            .ignore()
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// The user a token hash belongs to, while the session lives.
    pub async fn session_user(&self, token_hash: &str) -> AppResult<Option<UserName>> {
        let mut conn = self.conn().await?;
        let name: Option<String> = redis::cmd("GET")
            .arg(keys::session(token_hash))
            .query_async(&mut conn)
            .await?;
        Ok(name.map(UserName::from_stored))
    }

    /// Revokes a session; true when one was revoked.
    pub async fn delete_session(&self, token_hash: &str) -> AppResult<bool> {
        let mut conn = self.conn().await?;
        let n: i64 = redis::cmd("DEL")
            .arg(keys::session(token_hash))
            .query_async(&mut conn)
            .await?;
        Ok(n == 1)
    }
}

/// Karma is the integer part of a `karma:` score (the fraction is the
/// tie-break, see the karma Lua in `scripts.rs`).
fn karma_of(score: f64) -> i64 {
    score.floor() as i64
}

/// A user's standing on the leaderboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub karma: i64,
    /// 1-based; None for users who never received a vote.
    pub rank: Option<u64>,
}

impl Store {
    /// The `limit` users with the most karma, best first, with their karma.
    pub async fn top_posters(&self, limit: usize) -> AppResult<Vec<(String, i64)>> {
        let mut conn = self.conn().await?;
        let reply: Vec<Value> = redis::cmd("ZREVRANGE")
            .arg(keys::KARMA)
            .arg(0)
            .arg(limit as isize - 1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        Ok(reply
            .chunks_exact(2)
            .filter_map(|pair| {
                let member = value_str(&pair[0])?;
                let name = member.strip_prefix("user:").unwrap_or(member).to_owned();
                Some((name, karma_of(value_f64(&pair[1])?)))
            })
            .collect())
    }

    /// Karma and rank of many users in one pipelined round trip.
    pub async fn standings(&self, names: &[String]) -> AppResult<HashMap<String, Standing>> {
        let mut pipe = redis::pipe();
        for name in names {
            let member = keys::user(name);
            pipe.cmd("ZSCORE").arg(keys::KARMA).arg(&member);
            pipe.cmd("ZREVRANK").arg(keys::KARMA).arg(&member);
        }
        let mut conn = self.conn().await?;
        let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        Ok(names
            .iter()
            .zip(replies.chunks_exact(2))
            .map(|(name, pair)| {
                let standing = Standing {
                    karma: value_f64(&pair[0]).map(karma_of).unwrap_or(0),
                    rank: match pair[1] {
                        Value::Int(r) => Some(r as u64 + 1),
                        _ => None,
                    },
                };
                (name.clone(), standing)
            })
            .collect())
    }
}
