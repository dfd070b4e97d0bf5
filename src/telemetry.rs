//! Logs and per-request telemetry: the log format, request ids, the access
//! log line and the request metrics of [`crate::metrics`].
//!
//! Every HTTP request runs in a `request` span carrying its request id, so
//! each log line written while serving it (a Redis failure, a WebSocket's
//! lines long after the upgrade) names the request it belongs to, and the
//! same id goes back in the `X-Request-Id` response header for the client
//! to quote. An id a proxy or client sends is kept when it is sane, so one
//! id follows a request through every hop.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use poem::http::{HeaderMap, HeaderValue, StatusCode};
use poem::{Endpoint, IntoResponse, Request, Response};
use tracing::Instrument;
use tracing_subscriber::EnvFilter;

use crate::metrics::{Operation, OperationKind, RequestMetrics, Route, CODES};

/// The request id header, read from requests and set on every response.
pub const REQUEST_ID: &str = "x-request-id";

/// Longest incoming request id kept (a UUID is 36, a W3C trace id 32).
const MAX_REQUEST_ID: usize = 128;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line, for log shippers: the event's fields at
    /// the top level, its spans' fields (the request id among them) under
    /// `span` and `spans`.
    Json,
}

/// Installs the process' log subscriber: `RUST_LOG` filters (default
/// `info`), lines go to stderr.
pub fn init_logging(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,poem=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

/// The request's id: the incoming `X-Request-Id` when it is sane (1 to 128
/// characters of letters, digits and `-_.:+/=@`, so it cannot forge log
/// fields or carry a payload), else 16 new random hex digits.
pub fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|id| sane_id(id))
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{:016x}", rand::random::<u64>()))
}

fn sane_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:+/=@".contains(&b))
}

/// What the handlers tell the middleware about a GraphQL request.
#[derive(Default)]
struct Outcome {
    operation: Operation,
    code: Option<&'static str>,
}

tokio::task_local! {
    /// The current request's outcome, filled in by the handlers (see
    /// [`note_operation`]); the middleware reads it once the response is
    /// ready. A task-local keeps the handlers' signatures as they are.
    static OUTCOME: RefCell<Outcome>;
}

/// Records which operation the current request runs (no-op outside one).
pub fn note_operation(operation: Operation) {
    let _ = OUTCOME.try_with(|o| o.borrow_mut().operation = operation);
}

/// Records the current request's outcome code, the `extensions.code` of
/// its first error (no-op outside a request).
pub fn note_code(code: &str) {
    let code = CODES
        .iter()
        .find(|c| **c == code)
        .copied()
        .unwrap_or("OTHER");
    let _ = OUTCOME.try_with(|o| o.borrow_mut().code = Some(code));
}

/// Records the code of an executed response's first error, if any.
pub fn note_response(response: &async_graphql::Response) {
    if let Some(error) = response.errors.first() {
        let code = error
            .extensions
            .as_ref()
            .and_then(|ext| ext.get("code"))
            .and_then(|code| match code {
                async_graphql::Value::String(code) => Some(code.as_str()),
                _ => None,
            })
            .unwrap_or("OTHER");
        note_code(code);
    }
}

/// The middleware around every route: the request span with its id, the
/// `served` line, the request metrics and the `X-Request-Id` header.
///
/// The `served` line has the path without its query string (a GET may
/// carry a logIn's password in it), and no bodies: no secret reaches the
/// log at any level.
pub async fn access_log<E: Endpoint>(
    endpoint: Arc<E>,
    req: Request,
    metrics: Arc<RequestMetrics>,
) -> poem::Result<Response> {
    let id = request_id(req.headers());
    let route = Route::of(req.uri().path());
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %req.method(),
        path = %req.uri().path(),
        peer = %req.remote_addr(),
    );
    let started = Instant::now();
    let served = async {
        let result = endpoint.call(req).await;
        (result, OUTCOME.with(|o| o.take()))
    };
    let (result, outcome) = OUTCOME
        .scope(RefCell::new(Outcome::default()), served)
        .instrument(span.clone())
        .await;
    let mut response = match result {
        Ok(response) => response.into_response(),
        Err(e) => e.into_response(),
    };
    let elapsed = started.elapsed();
    let status = response.status();
    metrics.http(route, status, elapsed);
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    let ms = (elapsed.as_secs_f64() * 1e6).round() / 1e3;
    let _entered = span.enter();
    if route == Route::Graphql && status != StatusCode::SWITCHING_PROTOCOLS {
        let code = outcome
            .code
            .unwrap_or(if status.is_success() { "OK" } else { "OTHER" });
        metrics.graphql(&outcome.operation, code, elapsed);
        let operation = outcome.operation.name.as_ref().map(|n| {
            let name = n.as_str();
            &name[..name.floor_char_boundary(64)]
        });
        tracing::info!(
            status = status.as_u16(),
            ms,
            operation_type = outcome.operation.kind.map(OperationKind::label),
            operation,
            code,
            "served"
        );
    } else {
        tracing::info!(status = status.as_u16(), ms, "served");
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incoming_ids_are_kept_only_when_sane() {
        let with = |id: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(REQUEST_ID, HeaderValue::from_str(id).unwrap());
            request_id(&headers)
        };
        let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        assert_eq!(with(uuid), uuid);
        assert_eq!(with("abc:1/2+3=@x.y_z"), "abc:1/2+3=@x.y_z");
        for bad in ["", "a b", "a\"b", "x=1 level=ERROR", &"a".repeat(129)] {
            let id = with(bad);
            assert_ne!(id, bad);
            assert_eq!(id.len(), 16, "{id}");
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
        assert_ne!(request_id(&HeaderMap::new()), request_id(&HeaderMap::new()));
    }
}
