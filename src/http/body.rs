//! Reading a `POST /graphql` body: JSON only, bounded in size and time.

use std::time::Duration;

use bytes::Bytes;
use poem::error::ReadBodyError;
use poem::http::{header, HeaderMap};
use poem::Body;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::AppError;

/// How much of a request body the server reads, and for how long.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub timeout: Duration,
}

/// Bodies over the limit but at most this long are read and thrown away
/// before the `413` goes out: a client still sending when the server closes
/// gets a TCP reset, which destroys the answer it was about to read. Longer
/// ones are cut at once.
const DRAIN_BYTES: u64 = 16 * 1024 * 1024;

pub async fn request_from_body(
    headers: &HeaderMap,
    body: Body,
    limits: BodyLimits,
) -> Result<async_graphql::Request, AppError> {
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    if !matches!(
        media_type.as_deref(),
        Some("application/json" | "application/graphql-response+json")
    ) {
        return Err(AppError::UnsupportedMediaType);
    }
    let bytes = read_body(headers, body, limits).await?;
    parse_request(&bytes)
}

/// The body's bytes, at most `limits.max_bytes` of them, read within
/// `limits.timeout`.
async fn read_body(headers: &HeaderMap, body: Body, limits: BodyLimits) -> Result<Bytes, AppError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = AppError::PayloadTooLarge {
        max_bytes: limits.max_bytes,
    };
    if declared.is_some_and(|n| n > limits.max_bytes as u64) {
        if declared.is_some_and(|n| n <= DRAIN_BYTES) {
            drain(body.into_async_read(), limits.timeout).await;
        }
        return Err(too_large);
    }
    let mut reader = body.into_async_read();
    let read = read_limited(&mut reader, limits.max_bytes);
    match tokio::time::timeout(limits.timeout, read).await {
        Err(_) => Err(AppError::RequestTimeout),
        Ok(Err(ReadBodyError::PayloadTooLarge)) => {
            drain(reader, limits.timeout).await;
            Err(too_large)
        }
        Ok(Err(_)) => Err(AppError::BadRequest(
            "the request body could not be read".to_owned(),
        )),
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

/// One GraphQL request from a JSON body: no batches, and a query text
/// unless it is an automatic persisted query.
fn parse_request(bytes: &[u8]) -> Result<async_graphql::Request, AppError> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|_| AppError::BadRequest("the request body is not valid JSON".to_owned()))?;
    if value.is_array() {
        return Err(AppError::BadRequest(
            "batched requests are not supported: send one operation per request".to_owned(),
        ));
    }
    let persisted = value
        .get("extensions")
        .is_some_and(|e| e.get("persistedQuery").is_some());
    let has_text = match value.get("query") {
        Some(query) => query.is_string(),
        None => persisted,
    };
    if !has_text {
        return Err(AppError::BadRequest(
            "the request needs a query string".to_owned(),
        ));
    }
    serde_json::from_value(value).map_err(|_| {
        AppError::BadRequest(
            "the request must be {\"query\", \"operationName\", \"variables\", \"extensions\"} with variables an object".to_owned(),
        )
    })
}

async fn drain(reader: impl AsyncRead + Unpin, timeout: Duration) {
    let mut reader = reader.take(DRAIN_BYTES);
    let _ = tokio::time::timeout(
        timeout,
        tokio::io::copy(&mut reader, &mut tokio::io::sink()),
    )
    .await;
}

/// Reads at most `limit` bytes; `PayloadTooLarge` past it (the reader is
/// left where it stopped, for [`drain`]).
async fn read_limited(
    reader: &mut (impl AsyncRead + Unpin),
    limit: usize,
) -> Result<Bytes, ReadBodyError> {
    let mut data = Vec::new();
    reader.take(limit as u64 + 1).read_to_end(&mut data).await?;
    if data.len() > limit {
        return Err(ReadBodyError::PayloadTooLarge);
    }
    Ok(data.into())
}
