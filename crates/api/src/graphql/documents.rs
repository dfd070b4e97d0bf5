//! Parsed documents by query text, at most [`MAX_DOCUMENT_TEXT_BYTES`] of
//! text; past it the least used go, so a flood of distinct documents costs
//! re-parsing, never memory.

use std::sync::Arc;

use async_graphql::parser::types::ExecutableDocument;
use quick_cache::sync::Cache;
use quick_cache::Weighter;

/// Documents larger than this are parsed every time (and not kept).
const MAX_CACHED_DOCUMENT: usize = 16 * 1024;
/// The documents an app sends: a few hundred at most.
const EXPECTED_DOCUMENTS: usize = 1024;
pub(crate) const MAX_DOCUMENT_TEXT_BYTES: usize = 2 * 1024 * 1024;

/// A parsed document, or a persisted query's text by its hash, weighs its
/// text's bytes.
#[derive(Clone)]
pub(crate) struct TextBytes;

impl Weighter<Arc<str>, Arc<ExecutableDocument>> for TextBytes {
    fn weight(&self, text: &Arc<str>, _: &Arc<ExecutableDocument>) -> u64 {
        text.len() as u64
    }
}

impl Weighter<String, Arc<str>> for TextBytes {
    fn weight(&self, _: &String, text: &Arc<str>) -> u64 {
        text.len() as u64
    }
}

pub struct DocumentCache {
    documents: Cache<Arc<str>, Arc<ExecutableDocument>, TextBytes>,
}

impl Default for DocumentCache {
    fn default() -> Self {
        let documents = Cache::with_weighter(
            EXPECTED_DOCUMENTS,
            MAX_DOCUMENT_TEXT_BYTES as u64,
            TextBytes,
        );
        Self { documents }
    }
}

impl DocumentCache {
    /// The cached parse of `query`, if any.
    pub fn get(&self, query: &str) -> Option<Arc<ExecutableDocument>> {
        self.documents.get(query)
    }

    /// Parses `query` and keeps it; the parser's error when it does not
    /// parse (nothing is kept then).
    pub fn parse(
        &self,
        query: &str,
    ) -> Result<Arc<ExecutableDocument>, async_graphql::parser::Error> {
        let doc = Arc::new(async_graphql::parser::parse_query(query)?);
        if query.len() <= MAX_CACHED_DOCUMENT {
            self.documents.insert(Arc::from(query), doc.clone());
        }
        Ok(doc)
    }

    /// Documents and text bytes kept, and lookups, for `/health` and
    /// `/metrics`.
    pub fn stats(&self) -> DocumentStats {
        DocumentStats {
            entries: self.documents.len() as u64,
            text_bytes: self.documents.weight(),
            hits: self.documents.hits(),
            misses: self.documents.misses(),
        }
    }
}

/// The parsed-document cache's size and counters.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentStats {
    pub entries: u64,
    pub text_bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_parsed_once_bounded_in_bytes_and_the_used_ones_stay() {
        let documents = DocumentCache::default();
        assert!(documents.parse("{ articles { id ").is_err());
        assert!(documents.get("{ articleCount }").is_none());
        let a = documents.parse("{ articleCount }").unwrap();
        // A second lookup is the same parsed document.
        assert!(Arc::ptr_eq(&a, &documents.get("{ articleCount }").unwrap()));
        // Distinct documents never hold more than the text budget, and
        // one in use all along is not pushed out by them.
        let padding = "#".repeat(15_000);
        for i in 0..400 {
            let _ = documents.parse(&format!("{{ articleCount }} {padding} {i}"));
            assert!(documents.stats().text_bytes <= MAX_DOCUMENT_TEXT_BYTES as u64);
            assert!(
                documents.get("{ articleCount }").is_some(),
                "evicted at {i}"
            );
        }
    }
}
