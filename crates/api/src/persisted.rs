//! Automatic persisted queries, in Apollo's protocol (docs/api.md). The
//! documents live in Redis, shared by all instances; each process keeps the
//! texts it has seen (2 MiB at most), so a warm hash costs no round trip.
//! A request's id is looked up in the trusted documents (`trusted.rs`) first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_graphql::Value;

use crate::client_addr::ClientAddr;
use crate::error::{AppError, AppResult};
use crate::graphql::documents::TextBytes;
use crate::store::{RegisterLimits, Store};
use crate::trusted::{sha256_hex, sha256_of_id, TrustedDocuments};

/// Texts kept in-process: an app's few distinct queries, and at most this
/// many bytes of them (the least used go first).
const LOCAL_EXPECTED_DOCUMENTS: usize = 1024;
const LOCAL_MAX_TEXT_BYTES: u64 = 2 * 1024 * 1024;

/// The registry: Redis behind an in-process map.
pub struct PersistedQueries {
    store: Store,
    limits: RegisterLimits,
    local: quick_cache::sync::Cache<String, Arc<str>, TextBytes>,
    redis_hits: AtomicU64,
    misses: AtomicU64,
    registrations: AtomicU64,
    refused: AtomicU64,
    trusted: TrustedDocuments,
}

/// A request that carries a text to register under its (verified) hash,
/// once the document passed the limits.
pub(crate) struct Registration {
    hash: String,
}

/// The hash a request's `extensions.persistedQuery` names, if it has one;
/// a malformed one is a `BAD_REQUEST`.
pub(crate) fn requested_hash(
    extensions: &HashMap<String, async_graphql::Value>,
) -> AppResult<Option<String>> {
    let Some(persisted) = extensions.get("persistedQuery") else {
        return Ok(None);
    };
    let bad = |what: &str| AppError::BadRequest(format!("extensions.persistedQuery: {what}"));
    let Value::Object(persisted) = persisted else {
        return Err(bad("must be an object {version: 1, sha256Hash}"));
    };
    match persisted.get("version") {
        Some(Value::Number(n)) if n.as_u64() == Some(1) => {}
        _ => return Err(bad("only version 1 is supported")),
    }
    match persisted.get("sha256Hash") {
        Some(Value::String(hash))
            if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Ok(Some(hash.to_ascii_lowercase()))
        }
        _ => Err(bad("sha256Hash must be 64 hexadecimal digits")),
    }
}

impl PersistedQueries {
    pub fn new(store: Store, limits: RegisterLimits, trusted: TrustedDocuments) -> Self {
        Self {
            store,
            limits,
            local: quick_cache::sync::Cache::with_weighter(
                LOCAL_EXPECTED_DOCUMENTS,
                LOCAL_MAX_TEXT_BYTES,
                TextBytes,
            ),
            redis_hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            registrations: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            trusted,
        }
    }

    /// Gives `request` the text of the document it names by `documentId`
    /// or hash: a trusted document's, else (unless only trusted documents
    /// run) a registered one's, or `PERSISTED_QUERY_NOT_FOUND`. With a
    /// hash and a text, the text must hash to the hash, and the
    /// registration to make comes back.
    pub(crate) async fn resolve(
        &self,
        request: &mut async_graphql::Request,
        document_id: Option<&str>,
    ) -> AppResult<Option<Registration>> {
        if self.resolve_trusted(request, document_id)? {
            return Ok(None);
        }
        let hash = match document_id {
            Some(id) => Some(sha256_of_id(id).ok_or(AppError::PersistedQueryNotFound)?),
            None => requested_hash(&request.extensions)?,
        };
        let Some(hash) = hash else {
            return Ok(None);
        };
        if request.query.is_empty() {
            let text = self
                .lookup(&hash)
                .await?
                .ok_or(AppError::PersistedQueryNotFound)?;
            request.query = text.to_string();
            return Ok(None);
        }
        if sha256_hex(&request.query) != hash {
            return Err(AppError::BadRequest(
                "extensions.persistedQuery.sha256Hash is not the SHA-256 of the query".to_owned(),
            ));
        }
        Ok(Some(Registration { hash }))
    }

    /// The trusted documents' part of [`Self::resolve`], which reads no
    /// Redis (a WebSocket needs the text to tell a subscription): true
    /// when `request` names or sends a trusted document, whose text it
    /// now has. Only trusted documents running, any other is refused.
    pub fn resolve_trusted(
        &self,
        request: &mut async_graphql::Request,
        document_id: Option<&str>,
    ) -> AppResult<bool> {
        let requested = requested_hash(&request.extensions)?;
        let bad = |message: &str| Err(AppError::BadRequest(message.to_owned()));
        let id = match (document_id, requested.as_deref()) {
            (Some(_), Some(_)) => {
                return bad("send documentId or extensions.persistedQuery, not both")
            }
            (Some(_), None) if !request.query.is_empty() => {
                return bad("a request with a documentId sends no query")
            }
            (id, hash) => id.or(hash),
        };
        match id.and_then(|id| self.trusted.get(id)) {
            Some(text) if request.query.is_empty() => request.query = text.to_string(),
            Some(text) if request.query == **text => {}
            _ if !self.trusted.only => return Ok(false),
            _ if id.is_none() && self.trusted.get(&sha256_hex(&request.query)).is_some() => {}
            _ => {
                return Err(AppError::PersistedQueryNotInList(match id {
                    Some(_) => "no trusted document has this id",
                    None => "this server runs only its trusted documents: name one by documentId",
                }))
            }
        }
        Ok(true)
    }

    /// Registers a checked document from `client`. A refusal is the
    /// request's answer; a failure to reach Redis is only logged (the
    /// client registers again on its next miss).
    pub(crate) async fn register(
        &self,
        registration: Registration,
        text: &str,
        client: ClientAddr,
    ) -> AppResult<()> {
        let Registration { hash } = registration;
        let stored = self
            .store
            .register_document(&hash, text, client, self.limits)
            .await;
        match stored {
            Ok(()) => {
                self.registrations.fetch_add(1, Ordering::Relaxed);
                self.local.insert(hash, Arc::from(text));
                Ok(())
            }
            Err(e @ (AppError::RateLimited { .. } | AppError::RegistrationsPaused { .. })) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
            Err(e) => {
                tracing::warn!(error = %e, "persisted query not registered");
                Ok(())
            }
        }
    }

    /// The text under `hash`: from this process' map, else from Redis.
    async fn lookup(&self, hash: &str) -> AppResult<Option<Arc<str>>> {
        if let Some(text) = self.local.get(hash) {
            return Ok(Some(text));
        }
        let Some(text) = self.store.persisted_document(hash).await? else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        };
        if sha256_hex(&text) != hash {
            // Written by someone else under a wrong name: not ours to run.
            tracing::warn!("a persisted document in Redis does not match its hash");
            self.misses.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        self.redis_hits.fetch_add(1, Ordering::Relaxed);
        let text: Arc<str> = Arc::from(text);
        self.local.insert(hash.to_owned(), text.clone());
        Ok(Some(text))
    }

    /// Counters and sizes, for `/health`.
    pub fn stats(&self) -> serde_json::Value {
        let (entries, text_bytes) = (self.local.len(), self.local.weight());
        serde_json::json!({
            "entries": entries,
            "textBytes": text_bytes,
            "localHits": self.local.hits(),
            "redisHits": self.redis_hits.load(Ordering::Relaxed),
            "misses": self.misses.load(Ordering::Relaxed),
            "registrations": self.registrations.load(Ordering::Relaxed),
            "refusedRegistrations": self.refused.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn extensions(value: serde_json::Value) -> HashMap<String, Value> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_persisted_query_extension_is_read_strictly() {
        let hash = sha256_hex("{ articleCount }");
        assert_eq!(hash.len(), 64);
        let ok = extensions(serde_json::json!({
            "persistedQuery": { "version": 1, "sha256Hash": hash.to_uppercase() }
        }));
        assert_eq!(requested_hash(&ok).unwrap(), Some(hash.clone()));
        assert_eq!(requested_hash(&HashMap::new()).unwrap(), None);
        for bad in [
            serde_json::json!({ "persistedQuery": "x" }),
            serde_json::json!({ "persistedQuery": { "version": 2, "sha256Hash": hash } }),
            serde_json::json!({ "persistedQuery": { "version": 1, "sha256Hash": "abc" } }),
            serde_json::json!({ "persistedQuery": { "version": 1 } }),
        ] {
            let err = requested_hash(&extensions(bad.clone())).unwrap_err();
            assert_eq!(err.code(), ErrorCode::BadRequest, "{bad}");
        }
    }
}
