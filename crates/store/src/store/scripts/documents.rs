//! Registering the documents of automatic persisted queries, bounded in
//! number, rate and memory (`lua/register_document.lua`).

use std::sync::LazyLock;

use redis::Value;

use super::library::RATE_LIMIT;
use super::{seconds, status, Lua, ScriptReply};
use crate::error::AppResult;
use crate::rate::RateAction;
use crate::rate::RateLimit;
use crate::store::keys::{self, At};
use crate::store::Conn;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterReply {
    /// Kept (a known document: its TTL and place refreshed).
    Registered,
    /// Redis is near its `maxmemory`: nothing was written.
    MemoryNearlyFull,
    AddressLimited(u64),
    SiteLimited(u64),
}

impl ScriptReply for RegisterReply {
    fn read(reply: &Value) -> Option<Self> {
        match status(reply)? {
            ("ok", _) => Some(Self::Registered),
            ("memory", _) => Some(Self::MemoryNearlyFull),
            ("address", v) => Some(Self::AddressLimited(seconds(v)?)),
            ("site", v) => Some(Self::SiteLimited(seconds(v)?)),
            _ => None,
        }
    }
}

/// Registers a document under its SHA-256.
///
/// Registrations older than the TTL have expired with their key and are
/// pruned from the index first. A known document is refreshed (TTL and
/// place) without being counted: it takes no new memory. A new one is
/// refused, writing nothing, when Redis' `used_memory` has reached the
/// share of `maxmemory` (the room left is for users' writes), then counted
/// against the address and the site. A new document past the cap pushes
/// the oldest ones out (their keys are deleted), so the documents held
/// never exceed the cap. Times are Redis' clock in microseconds, made
/// strictly increasing, so "oldest" is registration order even within one
/// second.
static REGISTER: LazyLock<Lua<RegisterReply>> = LazyLock::new(|| {
    Lua::new(
        "register-document",
        &[RATE_LIMIT, include_str!("../lua/register_document.lua")],
    )
});

/// How a registration is bounded (see the script, `REGISTER`).
#[derive(Debug, Clone, Copy)]
pub struct RegisterLimits {
    pub ttl_secs: u64,
    pub max_documents: u64,
    pub per_address: RateLimit,
    pub per_site: RateLimit,
    pub max_memory_percent: u8,
}

pub async fn register_document(
    conn: &mut Conn,
    at: At,
    sha256_hex: &str,
    text: &str,
    address_key: String,
    limits: RegisterLimits,
) -> AppResult<RegisterReply> {
    let mut invocation = REGISTER.invocation();
    invocation
        .key(at.key(keys::document(sha256_hex)))
        .key(at.key(keys::DOCUMENTS))
        .key(at.key(address_key))
        .key(at.key(keys::site_rate(RateAction::RegisterQuery)))
        .arg(text)
        .arg(limits.ttl_secs.max(1))
        .arg(limits.max_documents.max(1))
        .arg(limits.per_address.count())
        .arg(limits.per_address.window_secs())
        .arg(limits.per_site.count())
        .arg(limits.per_site.window_secs())
        .arg(limits.max_memory_percent);
    REGISTER.call(&invocation, conn).await
}
