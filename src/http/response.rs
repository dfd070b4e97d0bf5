//! The answers `/graphql` sends: a response body as the client negotiated
//! it, a request that failed before execution, and a refusal.

use std::sync::Arc;

use poem::http::{header, StatusCode};
use poem::{Body, Response};

use super::cache_headers::{
    etag, if_none_match, PRIVATE_CACHE_CONTROL, PUBLIC_CACHE_CONTROL, VARY,
};
use super::negotiate::{Media, Wants};
use crate::budget::{HeldBody, Permit};
use crate::cache::{Cached, ResponseCache};
use crate::compression;
use crate::error::AppError;
use crate::telemetry;

/// A response body as `wants` asks: its media type, compressed above
/// [`compression::MIN_BYTES`] (a cached entry keeps its forms), and its
/// caching headers: a `public` one without errors gets an `ETag`, and a
/// matching `If-None-Match` a `304`.
pub fn reply(
    headers: &poem::http::HeaderMap,
    wants: Wants,
    cached: &Arc<Cached>,
    entry: Option<(&ResponseCache, &str)>,
    public: bool,
) -> Response {
    let public = public && cached.ok();
    let compressed = wants
        .encoding
        .filter(|_| cached.body().len() >= compression::MIN_BYTES)
        .and_then(|encoding| {
            let form = match entry {
                Some((cache, key)) => cache.encoded(key, cached, encoding),
                None => encoding.compress(cached.body(), compression::Level::Fast),
            };
            form.map(|form| (encoding, form))
        });
    let mut response = Response::builder().header(header::VARY, VARY);
    if public {
        let encoding = compressed.as_ref().map(|(encoding, _)| *encoding);
        let etag = etag(cached.tag(), wants.media, encoding);
        response = response
            .header(header::CACHE_CONTROL, PUBLIC_CACHE_CONTROL)
            .header(header::ETAG, &etag);
        if if_none_match(headers, &etag) {
            return response.status(StatusCode::NOT_MODIFIED).finish();
        }
    } else {
        response = response.header(header::CACHE_CONTROL, PRIVATE_CACHE_CONTROL);
    }
    response = response.content_type(wants.media.content_type());
    match compressed {
        Some((encoding, form)) => response
            .header(header::CONTENT_ENCODING, encoding.name())
            .body(form),
        None => response.body(cached.body().clone()),
    }
}

/// `response` with its body holding `permit` until it is written.
pub fn held(response: Response, permit: Option<Permit>) -> Response {
    let Some(permit) = permit else {
        return response;
    };
    type BoxBody = http_body_util::combinators::BoxBody<bytes::Bytes, std::io::Error>;
    let (parts, body) = response.into_parts();
    let body = BoxBody::new(HeldBody {
        body: BoxBody::from(body),
        _permit: permit,
    });
    Response::from_parts(parts, Body::from(body))
}

/// The answer to a request that failed before execution: its errors
/// without `data`, `400` under `application/graphql-response+json`.
pub fn request_error(response: &async_graphql::Response, media: Media) -> Response {
    #[derive(serde::Serialize)]
    struct WithoutData<'a> {
        errors: &'a [async_graphql::ServerError],
        #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        extensions: &'a std::collections::BTreeMap<String, async_graphql::Value>,
    }
    let body = serde_json::to_string(&WithoutData {
        errors: &response.errors,
        extensions: &response.extensions,
    })
    .unwrap_or_default();
    Response::builder()
        .status(media.request_error_status())
        .content_type(media.content_type())
        .header(header::CACHE_CONTROL, PRIVATE_CACHE_CONTROL)
        .header(header::VARY, VARY)
        .body(body)
}

/// A request that fails before any execution: a JSON GraphQL error (no
/// `data`) with the status for `media`, `Allow` and `Retry-After`.
pub fn refusal(error: AppError, media: Media) -> Response {
    telemetry::note_code(error.code().as_str());
    let mut response = Response::builder()
        .status(media.status(&error))
        .content_type(media.content_type())
        .header(header::CACHE_CONTROL, PRIVATE_CACHE_CONTROL)
        .header(header::VARY, VARY);
    match error {
        AppError::MethodNotAllowed => response = response.header(header::ALLOW, "POST"),
        AppError::UnsupportedMethod => response = response.header(header::ALLOW, "GET, POST"),
        AppError::GetOnly => response = response.header(header::ALLOW, "GET"),
        _ => {}
    }
    if let Some(secs) = error.retry_after() {
        response = response.header(header::RETRY_AFTER, secs);
    }
    response.body(error.into_json_body())
}

/// [`refusal`] as `application/json`, for answers outside the GraphQL
/// exchange (WebSocket upgrades, other methods).
pub fn error_response(error: AppError) -> Response {
    refusal(error, Media::Json)
}
