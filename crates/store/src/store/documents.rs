//! Automatic persisted queries in Redis: one string per document, shared
//! by every server instance, capped in number, expiring, and registered
//! within rate limits and Redis' memory (see
//! [`scripts::register_document`]).

use super::keys;
use super::scripts::{self, RegisterLimits, RegisterReply};
use super::Store;
use crate::client_addr::ClientAddr;
use crate::error::{AppError, AppResult};
use crate::rate::RateAction;
use crate::rate::RateScope;

/// Seconds a client refused for Redis' memory is told to wait.
const MEMORY_RETRY_AFTER_SECS: u64 = 60;

impl Store {
    /// The text registered under `sha256_hex`, if any (one GET).
    pub async fn persisted_document(&self, sha256_hex: &str) -> AppResult<Option<String>> {
        let mut conn = self.conn().await?;
        let at = self.layout.at(self.layout.site());
        let text: Option<String> = redis::cmd("GET")
            .arg(at.key(keys::document(sha256_hex)))
            .query_async(&mut conn)
            .await?;
        Ok(text)
    }

    /// Keeps `text` under `sha256_hex`, registered by `client`, within
    /// `limits`: RATE_LIMITED past the address' or the site's limit,
    /// SERVICE_UNAVAILABLE when Redis is nearly full; nothing is written
    /// then.
    pub async fn register_document(
        &self,
        sha256_hex: &str,
        text: &str,
        client: ClientAddr,
        limits: RegisterLimits,
    ) -> AppResult<()> {
        let mut conn = self.conn().await?;
        // Documents, their index and both counters are the site's: the
        // address' counter is read by this script alone.
        let at = self.layout.at(self.layout.site());
        let address_key = keys::client_rate(client, RateAction::RegisterQuery);
        let reply =
            scripts::register_document(&mut conn, at, sha256_hex, text, address_key, limits);
        let reply = reply.await?;
        let limited = |scope, secs| AppError::rate_limited(RateAction::RegisterQuery, scope, secs);
        match reply {
            RegisterReply::Registered => Ok(()),
            RegisterReply::MemoryNearlyFull => Err(AppError::RegistrationsPaused {
                retry_after_secs: MEMORY_RETRY_AFTER_SECS,
            }),
            RegisterReply::AddressLimited(secs) => Err(limited(RateScope::Address, secs)),
            RegisterReply::SiteLimited(secs) => Err(limited(RateScope::Site, secs)),
        }
    }
}
