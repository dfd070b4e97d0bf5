//! Content negotiation: the media type a response is sent as (`Accept`)
//! and its content coding (`Accept-Encoding`).

use poem::http::{header, HeaderMap, StatusCode};

use crate::compression::{self, Encoding};
use crate::error::AppError;

/// The media type of the GraphQL-over-HTTP spec, answered when asked for.
pub const GRAPHQL_RESPONSE_JSON: &str = "application/graphql-response+json";

/// The media type a response is sent as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Media {
    /// `application/json`, the default: requests that fail before
    /// execution answer `200` (the spec's legacy rules), with no `data`.
    Json,
    /// `application/graphql-response+json`: a response without `data`
    /// answers `4xx`/`5xx` (see [`AppError::graphql_response_status`]).
    GraphqlResponse,
}

impl Media {
    /// From `Accept`: `application/graphql-response+json` when listed with
    /// a `q` at least that of `application/json` (or a wildcard).
    pub fn of(headers: &HeaderMap) -> Self {
        let (mut graphql_q, mut json_q) = (0.0f32, 0.0f32);
        for value in headers.get_all(header::ACCEPT) {
            let Ok(value) = value.to_str() else { continue };
            for (media, q) in value.split(',').map(media_range) {
                match media.as_str() {
                    GRAPHQL_RESPONSE_JSON => graphql_q = graphql_q.max(q),
                    "application/json" | "application/*" | "*/*" => json_q = json_q.max(q),
                    _ => {}
                }
            }
        }
        if graphql_q > 0.0 && graphql_q >= json_q {
            Media::GraphqlResponse
        } else {
            Media::Json
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Media::Json => "application/json",
            Media::GraphqlResponse => GRAPHQL_RESPONSE_JSON,
        }
    }

    /// The HTTP status of a request refused with `error`.
    pub fn status(self, error: &AppError) -> StatusCode {
        match self {
            Media::Json => error.http_status(),
            Media::GraphqlResponse => error.graphql_response_status(),
        }
    }

    /// The HTTP status of a request that failed before execution.
    pub fn request_error_status(self) -> StatusCode {
        match self {
            Media::Json => StatusCode::OK,
            Media::GraphqlResponse => StatusCode::BAD_REQUEST,
        }
    }
}

/// One item of `Accept`: its media range (lowercase) and its `q` (1 when
/// absent, 0 when unreadable).
fn media_range(item: &str) -> (String, f32) {
    let mut parts = item.split(';');
    let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    (media, compression::quality(parts))
}

/// What the client asked for: a media type and a content coding.
#[derive(Clone, Copy, Debug)]
pub struct Wants {
    pub media: Media,
    pub encoding: Option<Encoding>,
}

impl Wants {
    pub fn of(headers: &HeaderMap) -> Self {
        Self {
            media: Media::of(headers),
            encoding: Encoding::negotiate(headers, &Encoding::ALL),
        }
    }
}
