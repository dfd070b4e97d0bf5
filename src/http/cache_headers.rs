//! Caching headers of `/graphql` answers: `Cache-Control`, `Vary`, and a
//! strong `ETag` per representation that `If-None-Match` is compared to.

use poem::http::{header, HeaderMap};

use super::negotiate::Media;
use crate::compression::Encoding;

/// `Cache-Control` of an anonymous `GET` query answered without errors: as
/// long as votegraph's own cache keeps it, and 10 s stale while refetched.
pub const PUBLIC_CACHE_CONTROL: &str = "public, max-age=1, stale-while-revalidate=10";
/// `Cache-Control` of everything else on `/graphql`: logged-in answers,
/// mutations, `POST`s, errors.
pub const PRIVATE_CACHE_CONTROL: &str = "private, no-store";
/// The request headers a `/graphql` answer depends on (CORS adds `Origin`).
pub const VARY: &str = "Accept, Accept-Encoding, Authorization, X-Query-Cost";

/// A strong validator per representation: the body's tag, media type and
/// content coding.
pub fn etag(tag: &str, media: Media, encoding: Option<Encoding>) -> String {
    let media = match media {
        Media::Json => "",
        Media::GraphqlResponse => ".gr",
    };
    let encoding = encoding
        .map(|e| format!(".{}", e.name()))
        .unwrap_or_default();
    format!("\"{tag}{media}{encoding}\"")
}

/// Whether `If-None-Match` names `etag` (or is `*`), compared weakly as
/// the header's semantics require for `GET`.
pub fn if_none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim())
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}
