//! An in-process cache of whole responses to anonymous queries (front
//! pages, group pages, single articles), for readers who are not logged in.
//!
//! Semantics, in order of strength:
//! - a cached response is never older than [`MAX_AGE`] (1 s): posts, group
//!   and slug changes made through other instances show within a second;
//! - every score change invalidates the whole cache when its pub/sub event
//!   arrives, so a vote anywhere is never hidden longer than the delivery of
//!   its event (the same moment subscribers see it);
//! - every write through this instance (except a page view) invalidates the
//!   cache at once, so a client reads its own writes;
//! - only anonymous requests whose operation is a query are cached, and only
//!   responses without errors; `myVote` and `me` need a login, so they are
//!   never cached.
//!
//! Invalidation is a generation counter: entries written under an older
//! generation are dead. A response computed while an invalidation happened
//! is stored under the generation read *before* executing, so it is never
//! served after that invalidation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_graphql::parser::types::{DocumentOperations, ExecutableDocument, OperationType};
use tokio::sync::broadcast::error::RecvError;

use crate::pubsub::PubSub;

pub const MAX_AGE: Duration = Duration::from_secs(1);
/// Past this many entries the cache is emptied (distinct anonymous queries
/// are few in practice: pages of a few lists).
const MAX_ENTRIES: usize = 4096;

struct Entry {
    generation: u64,
    stored: Instant,
    body: bytes::Bytes,
}

#[derive(Default)]
pub struct ResponseCache {
    entries: Mutex<HashMap<String, Entry>>,
    generation: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    invalidations: AtomicU64,
}

impl ResponseCache {
    /// A cache invalidated by `pubsub`'s score events (for as long as the
    /// returned cache lives).
    pub fn new(pubsub: &PubSub) -> Arc<Self> {
        let cache = Arc::new(Self::default());
        let weak = Arc::downgrade(&cache);
        let mut events = pubsub.subscribe_internal();
        tokio::spawn(async move {
            loop {
                let event = events.recv().await;
                let Some(cache) = weak.upgrade() else { break };
                match event {
                    Ok(_) | Err(RecvError::Lagged(_)) => cache.invalidate(),
                    Err(RecvError::Closed) => break,
                }
            }
        });
        cache
    }

    /// The current generation; read it before executing a query.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.invalidations.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, key: &str) -> Option<bytes::Bytes> {
        let generation = self.generation();
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let hit = entries
            .get(key)
            .filter(|e| e.generation == generation && e.stored.elapsed() < MAX_AGE)
            .map(|e| e.body.clone());
        drop(entries);
        let counter = if hit.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        hit
    }

    /// Stores a response computed under `generation`.
    pub fn put(&self, key: String, generation: u64, body: bytes::Bytes) {
        if generation != self.generation() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(
            key,
            Entry {
                generation,
                stored: Instant::now(),
                body,
            },
        );
    }

    /// `{hits, misses, invalidations}` so far, for `/health` and the benchmark.
    pub fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "hits": self.hits.load(Ordering::Relaxed),
            "misses": self.misses.load(Ordering::Relaxed),
            "invalidations": self.invalidations.load(Ordering::Relaxed),
        })
    }
}

/// Parsed documents by query text. Clients send the same few documents
/// over and over; parsing one costs more than cloning its syntax tree.
#[derive(Default)]
pub struct DocumentCache {
    documents: Mutex<HashMap<String, Arc<ExecutableDocument>>>,
}

/// Documents larger than this are parsed every time (and not kept).
const MAX_CACHED_DOCUMENT: usize = 16 * 1024;
const MAX_DOCUMENTS: usize = 1024;

impl DocumentCache {
    /// The parsed document, or None when it does not parse (async-graphql
    /// then reports the syntax error itself).
    pub fn get(&self, query: &str) -> Option<Arc<ExecutableDocument>> {
        if let Some(doc) = self
            .documents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(query)
        {
            return Some(doc.clone());
        }
        let doc = Arc::new(async_graphql::parser::parse_query(query).ok()?);
        if query.len() <= MAX_CACHED_DOCUMENT {
            let mut documents = self.documents.lock().unwrap_or_else(|p| p.into_inner());
            if documents.len() >= MAX_DOCUMENTS {
                documents.clear();
            }
            documents.insert(query.to_owned(), doc.clone());
        }
        Some(doc)
    }
}

/// Whether the operation a request selects is a query (not a mutation or a
/// subscription).
pub fn is_query(document: &ExecutableDocument, operation_name: Option<&str>) -> bool {
    match (&document.operations, operation_name) {
        (DocumentOperations::Single(op), _) => op.node.ty == OperationType::Query,
        (DocumentOperations::Multiple(ops), Some(name)) => ops
            .get(name)
            .is_some_and(|op| op.node.ty == OperationType::Query),
        (DocumentOperations::Multiple(_), None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_queries_are_cacheable() {
        let documents = DocumentCache::default();
        let query = |text: &str, name: Option<&str>| is_query(&documents.get(text).unwrap(), name);
        assert!(query("{ articles { id } }", None));
        assert!(query("query Front { articles { id } }", Some("Front")));
        assert!(!query("mutation { logOut }", None));
        assert!(!query("subscription { scoreChanged { score } }", None));
        assert!(!query(
            "query A { me { name } } mutation B { logOut }",
            Some("B")
        ));
        assert!(!query(
            "query A { me { name } } query B { me { name } }",
            None
        ));
        assert!(documents.get("{ articles { id ").is_none());
        // A second lookup is the same parsed document.
        let a = documents.get("{ articleCount }").unwrap();
        assert!(Arc::ptr_eq(&a, &documents.get("{ articleCount }").unwrap()));
    }

    #[test]
    fn entries_die_with_their_generation() {
        let cache = ResponseCache::default();
        let generation = cache.generation();
        cache.put("k".into(), generation, bytes::Bytes::from_static(b"1"));
        assert_eq!(cache.get("k").as_deref(), Some(&b"1"[..]));
        cache.invalidate();
        assert!(cache.get("k").is_none());
        // A response computed before an invalidation is not stored.
        cache.put("k".into(), generation, bytes::Bytes::from_static(b"2"));
        assert!(cache.get("k").is_none());
    }
}
