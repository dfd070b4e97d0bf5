//! Trusted documents: the operations the site's own clients ship, read
//! from a manifest at start-up and checked then (docs/api.md, "Trusted
//! documents"). `persisted.rs` looks requests' ids up here first.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::Value;
use sha2::Digest;

use crate::error::{AppError, AppResult};
use crate::graphql::limits::Guard;
use crate::graphql::validate::Validator;

/// Largest manifest read: far above an app's few hundred documents.
pub(crate) const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024;
/// Longest document id, in a manifest or a request.
pub(crate) const MAX_ID_BYTES: usize = 256;

pub(crate) fn sha256_hex(text: &str) -> String {
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// The manifest's documents (none without one), by their ids and by
/// their SHA-256s (lowercase hex).
#[derive(Default)]
pub struct TrustedDocuments {
    by_id: HashMap<String, Arc<str>>,
    /// `--trusted-documents-only`.
    pub only: bool,
}

/// The SHA-256 (lowercase hex) an id names, if it is one: `sha256:<hex>`
/// or 64 bare hexadecimal digits.
pub(crate) fn sha256_of_id(id: &str) -> Option<String> {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    let is_hash = hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    is_hash.then(|| hex.to_ascii_lowercase())
}

/// A request's `documentId`, if it has one: a string of 1 to
/// [`MAX_ID_BYTES`], else `BAD_REQUEST`.
pub fn document_id(value: Option<&Value>) -> AppResult<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_ID_BYTES => {
            Ok(Some(id.clone()))
        }
        Some(_) => Err(AppError::BadRequest(format!(
            "documentId must be a string of 1 to {MAX_ID_BYTES} bytes"
        ))),
    }
}

/// The `documentId` of a request in JSON (a POST body, a WebSocket
/// subscribe payload). `BAD_REQUEST` when it is malformed, or when the
/// request has no query text and names no document (by id or hash).
pub fn document_of(request: &Value) -> AppResult<Option<String>> {
    let document_id = document_id(request.get("documentId"))?;
    let named = document_id.is_some() || request["extensions"].get("persistedQuery").is_some();
    let has_text = match request.get("query") {
        Some(query) => query.is_string(),
        None => named,
    };
    if !has_text {
        let message = "the request needs a query string".to_owned();
        return Err(AppError::BadRequest(message));
    }
    Ok(document_id)
}

impl TrustedDocuments {
    /// Reads and checks the manifest at `path`, if any: an error names the
    /// entry and what is wrong with it.
    pub async fn load(path: Option<&Path>, only: bool, guard: &Guard) -> anyhow::Result<Self> {
        let mut trusted = Self {
            only,
            ..Self::default()
        };
        let Some(path) = path else {
            return Ok(trusted);
        };
        let context = || format!("trusted documents {}", path.display());
        let mut text = String::new();
        let file = std::fs::File::open(path).with_context(context)?;
        let read = file.take(MAX_MANIFEST_BYTES + 1).read_to_string(&mut text);
        read.with_context(context)?;
        if text.len() as u64 > MAX_MANIFEST_BYTES {
            anyhow::bail!("{}: over {MAX_MANIFEST_BYTES} bytes", context());
        }
        let validator = Validator::default();
        let entries = entries(&text).map_err(|e| anyhow::anyhow!("{}: {e}", context()))?;
        for entry in &entries {
            let added = trusted.add(entry, guard, &validator).await;
            added.map_err(|e| anyhow::anyhow!("{}: {}: {e}", context(), entry.label))?;
        }
        tracing::info!(entries = entries.len(), only, "trusted documents loaded");
        Ok(trusted)
    }

    /// The document `id` names: a SHA-256 in any of its forms, or an id
    /// exactly as the manifest gives it.
    pub fn get(&self, id: &str) -> Option<&Arc<str>> {
        let key = sha256_of_id(id).map_or(Cow::Borrowed(id), Cow::Owned);
        self.by_id.get(key.as_ref())
    }

    async fn add(&mut self, entry: &Entry, guard: &Guard, check: &Validator) -> Result<(), String> {
        let (id, body) = (entry.id.as_str(), entry.body.as_str());
        if id.is_empty() || id.len() > MAX_ID_BYTES {
            return Err(format!("the id must be 1 to {MAX_ID_BYTES} bytes long"));
        }
        let hash = sha256_hex(body);
        if sha256_of_id(id).is_some_and(|named| named != hash) {
            return Err(format!("the id is not the SHA-256 of its document, {hash}"));
        }
        if self.get(id).is_some_and(|known| **known != *body) {
            return Err("the id is given twice, with different documents".to_owned());
        }
        guard.check_document(body).map_err(|e| e.to_string())?;
        check.check(body).await?;
        let body: Arc<str> = Arc::from(body);
        if sha256_of_id(id).is_none() {
            self.by_id.insert(id.to_owned(), body.clone());
        }
        self.by_id.insert(hash, body);
        Ok(())
    }
}

/// One document of the manifest, with how to name it in an error.
struct Entry {
    label: String,
    id: String,
    body: String,
}

#[derive(Deserialize)]
struct ApolloManifest {
    format: String,
    version: u64,
    operations: Vec<Value>,
}

#[derive(Deserialize)]
struct ApolloOperation {
    id: String,
    name: Option<String>,
    body: String,
}

/// The manifest's documents: an object of id → document, or Apollo's
/// `{"format": "apollo-persisted-query-manifest", "version": 1, "operations"}`.
fn entries(text: &str) -> Result<Vec<Entry>, String> {
    let manifest: serde_json::Map<String, Value> = serde_json::from_str(text)
        .map_err(|e| format!("the manifest is not a JSON object: {e}"))?;
    if manifest.contains_key("format") {
        return apollo_entries(Value::Object(manifest));
    }
    let entry = |(id, body): (String, Value)| {
        let label = format!("entry {:?}", id.chars().take(80).collect::<String>());
        match body {
            Value::String(body) => Ok(Entry { label, id, body }),
            _ => Err(format!("{label}: the document must be a string")),
        }
    };
    manifest.into_iter().map(entry).collect()
}

fn apollo_entries(manifest: Value) -> Result<Vec<Entry>, String> {
    const FORMAT: &str = "apollo-persisted-query-manifest";
    let manifest: ApolloManifest =
        serde_json::from_value(manifest).map_err(|e| format!("not an {FORMAT}: {e}"))?;
    if (manifest.format.as_str(), manifest.version) != (FORMAT, 1) {
        return Err(format!("the format must be {FORMAT:?}, version 1"));
    }
    let entry = |(i, operation): (usize, Value)| {
        let operation: ApolloOperation =
            serde_json::from_value(operation).map_err(|e| format!("operations[{i}]: {e}"))?;
        let name = operation.name.as_deref().unwrap_or("anonymous");
        Ok(Entry {
            label: format!("operations[{i}] ({name})"),
            id: operation.id,
            body: operation.body,
        })
    };
    manifest
        .operations
        .into_iter()
        .enumerate()
        .map(entry)
        .collect()
}
