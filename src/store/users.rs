//! Accounts and login sessions.

use super::keys;
use super::scripts;
use super::Store;
use crate::domain::UserName;
use crate::error::AppResult;

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
            .invoke_async(&mut *conn)
            .await?;
        Ok(created_ok == 1)
    }

    /// The stored argon2 hash of a user's password, if the user exists.
    pub async fn password_hash(&self, name: &UserName) -> AppResult<Option<String>> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("HGET")
            .arg(keys::user(name.as_str()))
            .arg("password")
            .query_async(&mut *conn)
            .await?)
    }

    pub async fn create_session(&self, token_hash: &str, name: &UserName) -> AppResult<()> {
        let mut conn = self.conn().await?;
        let () = redis::cmd("SET")
            .arg(keys::session(token_hash))
            .arg(name.as_str())
            .arg("EX")
            .arg(keys::SESSION_TTL_SECS)
            .query_async(&mut *conn)
            .await?;
        Ok(())
    }

    /// The user a token hash belongs to, while the session lives.
    pub async fn session_user(&self, token_hash: &str) -> AppResult<Option<UserName>> {
        let mut conn = self.conn().await?;
        let name: Option<String> = redis::cmd("GET")
            .arg(keys::session(token_hash))
            .query_async(&mut *conn)
            .await?;
        Ok(name.map(UserName::from_stored))
    }

    /// Revokes a session; true when one was revoked.
    pub async fn delete_session(&self, token_hash: &str) -> AppResult<bool> {
        let mut conn = self.conn().await?;
        let n: i64 = redis::cmd("DEL")
            .arg(keys::session(token_hash))
            .query_async(&mut *conn)
            .await?;
        Ok(n == 1)
    }
}
