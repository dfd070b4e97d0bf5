//! Logs and per-request telemetry: the log format, request ids, the access
//! log line and the request metrics. Every request runs in a span with its
//! id (a sane incoming `X-Request-Id` is kept, so one id follows a request
//! through every hop).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use poem::http::{HeaderMap, HeaderValue, StatusCode};
use poem::{Endpoint, IntoResponse, Request, Response};
use tracing::Instrument;
use tracing_subscriber::EnvFilter;

use async_graphql::parser::types::OperationType;
use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use votegraph_domain::metrics::{buckets, MetricsBuilder};

/// The request id header, read from requests and set on every response.
pub const REQUEST_ID: &str = "x-request-id";

/// Longest incoming request id kept (a UUID is 36, a W3C trace id 32).
const MAX_REQUEST_ID: usize = 128;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line, for log shippers (spans' fields, the
    /// request id among them, under `span` and `spans`).
    Json,
}

/// Installs the log subscriber: `RUST_LOG` filters (default `info`).
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

/// The request's id: the incoming `X-Request-Id` when sane (it cannot
/// forge log fields or carry a payload), else 16 random hex digits.
pub fn request_id(headers: &HeaderMap) -> String {
    let sane = |b: u8| b.is_ascii_alphanumeric() || b"-_.:+/=@".contains(&b);
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|id| (1..=MAX_REQUEST_ID).contains(&id.len()) && id.bytes().all(sane))
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{:016x}", rand::random::<u64>()))
}

/// Bucket bounds of request latencies, in microseconds: from a cached
/// page to past the default execution deadline.
const REQUEST_BOUNDS_US: &[u64] = &[
    250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// A GraphQL operation's type and name (None: anonymous).
pub type Operation = (OperationType, Option<async_graphql::Name>);

/// The type label of a request's operation; `none` when none was chosen.
fn type_label(operation: Option<&Operation>) -> &'static str {
    match operation.map(|(kind, _)| kind) {
        Some(OperationType::Query) => "query",
        Some(OperationType::Mutation) => "mutation",
        Some(OperationType::Subscription) => "subscription",
        None => "none",
    }
}

/// The route label of `path`.
fn route_label(path: &str) -> &'static str {
    match path {
        "/graphql" => "graphql",
        "/health" => "health",
        "/metrics" => "metrics",
        "/" => "graphiql",
        p if p.starts_with("/assets/graphiql/") => "graphiql",
        _ => "other",
    }
}

/// Distinct operation names with series of their own; later names count
/// as `<other>`, so a client inventing names cannot grow the output.
pub const MAX_OPERATION_NAMES: usize = 100;
/// Longer names are cut to this many bytes.
const MAX_NAME_BYTES: usize = 64;

/// The series label of an operation without a name.
pub const ANONYMOUS: &str = "<anonymous>";
/// The series label of requests that failed before naming an operation.
pub const NO_OPERATION: &str = "<none>";
/// The series label shared by names past [`MAX_OPERATION_NAMES`].
pub const OTHER_OPERATIONS: &str = "<other>";
/// The `code` of a response without errors, and of codes not votegraph's.
const OK: &str = "OK";
const OTHER_CODE: &str = "OTHER";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GraphqlLabels {
    r#type: &'static str,
    operation: Arc<str>,
    code: &'static str,
}

/// Latencies by one label (`route`, or the operation's `type`).
type Histograms = Family<[(&'static str, &'static str); 1], Histogram, fn() -> Histogram>;

fn request_histogram() -> Histogram {
    Histogram::new(buckets(REQUEST_BOUNDS_US))
}

/// The HTTP and GraphQL request metrics, recorded by [`access_log`].
pub struct RequestMetrics {
    http: Family<HttpLabels, Counter>,
    http_duration: Histograms,
    graphql: Family<GraphqlLabels, Counter>,
    graphql_duration: Histograms,
    /// Operation names with series of their own (at most
    /// [`MAX_OPERATION_NAMES`]), each label allocated once.
    names: RwLock<std::collections::HashMap<Box<str>, Arc<str>>>,
    labels: [Arc<str>; 3],
}

impl Default for RequestMetrics {
    fn default() -> Self {
        Self {
            http: Family::default(),
            http_duration: Family::new_with_constructor(request_histogram),
            graphql: Family::default(),
            graphql_duration: Family::new_with_constructor(request_histogram),
            names: RwLock::default(),
            labels: [ANONYMOUS, NO_OPERATION, OTHER_OPERATIONS].map(Arc::from),
        }
    }
}

impl RequestMetrics {
    /// Registers the request metrics.
    pub fn register(&self, metrics: &mut MetricsBuilder) {
        metrics.register(
            "votegraph_http_requests",
            "HTTP requests answered, by route and status (WebSocket upgrades answer 101).",
            self.http.clone(),
        );
        metrics.register(
            "votegraph_http_request_duration_seconds",
            "Time from an HTTP request's arrival to its response, by route.",
            self.http_duration.clone(),
        );
        metrics.register(
            "votegraph_graphql_requests",
            "GraphQL requests over HTTP, by operation type, operation name and outcome code (OK: no error; cache hits included).",
            self.graphql.clone(),
        );
        metrics.register(
            "votegraph_graphql_request_duration_seconds",
            "Time of GraphQL requests over HTTP, by operation type.",
            self.graphql_duration.clone(),
        );
    }

    /// One HTTP request, answered with `status` after `elapsed`.
    pub fn http(&self, route: &'static str, status: StatusCode, elapsed: std::time::Duration) {
        self.http
            .get_or_create(&HttpLabels {
                route,
                status: status.as_u16(),
            })
            .inc();
        self.http_duration
            .get_or_create(&[("route", route)])
            .observe(elapsed.as_secs_f64());
    }

    /// One GraphQL request over HTTP: its operation, the code of its first
    /// error (`OK` without errors) and its time.
    pub fn graphql(
        &self,
        operation: Option<&Operation>,
        code: &'static str,
        elapsed: std::time::Duration,
    ) {
        let kind = type_label(operation);
        let name = match operation {
            None => self.labels[1].clone(),
            Some((_, None)) => self.labels[0].clone(),
            Some((_, Some(name))) => self.name(name.as_str()),
        };
        self.graphql
            .get_or_create(&GraphqlLabels {
                r#type: kind,
                operation: name,
                code,
            })
            .inc();
        self.graphql_duration
            .get_or_create(&[("type", kind)])
            .observe(elapsed.as_secs_f64());
    }

    /// The label of operation `name`: its own while fewer than
    /// [`MAX_OPERATION_NAMES`] names have one, else `<other>`.
    fn name(&self, name: &str) -> Arc<str> {
        let name = &name[..name.floor_char_boundary(MAX_NAME_BYTES)];
        if let Some(label) = self.names.read().get(name) {
            return label.clone();
        }
        let mut names = self.names.write();
        if let Some(label) = names.get(name) {
            return label.clone();
        }
        if names.len() >= MAX_OPERATION_NAMES {
            return self.labels[2].clone();
        }
        let label: Arc<str> = Arc::from(name);
        names.insert(name.into(), label.clone());
        label
    }
}

/// What the handlers tell the middleware about a GraphQL request.
#[derive(Default)]
struct Outcome {
    operation: Option<Operation>,
    code: Option<&'static str>,
}

tokio::task_local! {
    /// The current request's outcome, filled in by the handlers: a
    /// task-local keeps their signatures as they are.
    static OUTCOME: RefCell<Outcome>;
}

/// Records which operation the current request runs (no-op outside one).
pub fn note_operation(operation: Operation) {
    let _ = OUTCOME.try_with(|o| o.borrow_mut().operation = Some(operation));
}

/// Records the `extensions.code` of the current request's first error.
pub fn note_code(code: &'static str) {
    let _ = OUTCOME.try_with(|o| o.borrow_mut().code = Some(code));
}

/// The middleware around every route: the request span with its id, the
/// `served` line, the request metrics and the `X-Request-Id` header. The
/// line has no query string (a GET may carry a logIn's password) and no
/// bodies: no secret reaches the log.
pub async fn access_log<E: Endpoint>(
    endpoint: Arc<E>,
    req: Request,
    metrics: Arc<RequestMetrics>,
) -> poem::Result<Response> {
    let id = request_id(req.headers());
    let route = route_label(req.uri().path());
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
    let mut response = result.map_or_else(|e| e.into_response(), IntoResponse::into_response);
    let elapsed = started.elapsed();
    let status = response.status();
    metrics.http(route, status, elapsed);
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    let ms = (elapsed.as_secs_f64() * 1e6).round() / 1e3;
    let _entered = span.enter();
    if route == "graphql" && status != StatusCode::SWITCHING_PROTOCOLS {
        let code = outcome
            .code
            .unwrap_or(if status.is_success() { OK } else { OTHER_CODE });
        let operation = outcome.operation.as_ref();
        metrics.graphql(operation, code, elapsed);
        let name = operation.and_then(|(_, name)| name.as_ref()).map(|n| {
            let name = n.as_str();
            &name[..name.floor_char_boundary(MAX_NAME_BYTES)]
        });
        tracing::info!(
            status = status.as_u16(),
            ms,
            operation_type = operation.map(|_| type_label(operation)),
            operation = name,
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
