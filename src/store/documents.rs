//! Automatic persisted queries in Redis: one string per document, shared
//! by every server instance, capped in number and expiring.

use std::sync::LazyLock;

use redis::Script;

use super::{keys, Store};
use crate::error::AppResult;

/// Registers one document: KEYS `document:<sha256>` and
/// `document:registered`; ARGV the text, the TTL in seconds, the most
/// documents kept.
///
/// Registrations older than the TTL have expired with their key and are
/// pruned from the index first. Times are Redis' clock in microseconds,
/// made strictly increasing, so "oldest" is registration order even
/// within one second. A new document past the cap pushes the
/// oldest ones out (their keys are deleted), so the documents held never
/// exceed the cap, whatever the rate of registrations; a client whose
/// document was pushed out gets `PersistedQueryNotFound` and registers it
/// again. Registering a known document refreshes its TTL and its place.
static REGISTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local ttl = tonumber(ARGV[2])
local max = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) >= now then now = tonumber(last[2]) + 0.000001 end
if not redis.call('ZSCORE', KEYS[2], KEYS[1]) then
  local over = redis.call('ZCARD', KEYS[2]) - max + 1
  if over > 0 then
    local oldest = redis.call('ZPOPMIN', KEYS[2], over)
    for i = 1, #oldest, 2 do redis.call('DEL', oldest[i]) end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ttl)
redis.call('ZADD', KEYS[2], now, KEYS[1])
return 1
"#,
    )
});

impl Store {
    /// The text registered under `sha256_hex`, if any (one GET).
    pub async fn persisted_document(&self, sha256_hex: &str) -> AppResult<Option<String>> {
        let mut conn = self.conn().await?;
        let text: Option<String> = redis::cmd("GET")
            .arg(keys::document(sha256_hex))
            .query_async(&mut conn)
            .await?;
        Ok(text)
    }

    /// Keeps `text` under `sha256_hex` for `ttl_secs`, with at most
    /// `max_documents` documents kept in all (see [`REGISTER`]).
    pub async fn register_document(
        &self,
        sha256_hex: &str,
        text: &str,
        ttl_secs: u64,
        max_documents: u64,
    ) -> AppResult<()> {
        let mut conn = self.conn().await?;
        let _: i64 = REGISTER
            .key(keys::document(sha256_hex))
            .key(keys::DOCUMENTS)
            .arg(text)
            .arg(ttl_secs.max(1))
            .arg(max_documents.max(1))
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }
}
