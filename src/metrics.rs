//! Prometheus metrics, served as text by `GET /metrics`.
//!
//! Counters and histograms are plain atomics owned by the part they
//! measure (the HTTP middleware here, Redis commands in `store`, pub/sub in
//! `pubsub`), so recording one costs a few uncontended atomic additions and
//! never a lock on the request path. Sizes the parts keep anyway (pool
//! state, cache sizes, subscriptions, open WebSockets) are read when a
//! scrape comes, not on every request. A scrape makes no Redis call.
//!
//! Every label set is bounded: routes and status codes are fixed sets;
//! GraphQL operation names come from clients, so only the first
//! [`MAX_OPERATION_NAMES`] distinct names get series of their own and the
//! rest share `<other>`; error codes outside [`CODES`] count as `OTHER`.
//!
//! Who may read it: on the API's own port only loopback clients that did
//! not come through a proxy (see [`serves`]), so a server or proxy exposed
//! to the internet does not publish it by accident; `--metrics-bind` opens a
//! separate listener for a scraper elsewhere.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_graphql::parser::types::{DocumentOperations, ExecutableDocument, OperationType};
use poem::http::{header, StatusCode};
use poem::web::Data;
use poem::{handler, Request, Response};

use crate::error::AppError;
use crate::graphql::Api;
use crate::ws::WebSockets;

/// The text exposition format's media type (version 0.0.4).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// Bucket bounds of request latencies, in nanoseconds: 250 µs (a cached
/// page) to 10 s (past the default execution deadline).
const REQUEST_BOUNDS: &[u64] = &[
    250 * US,
    500 * US,
    MS,
    2 * MS + 500 * US,
    5 * MS,
    10 * MS,
    25 * MS,
    50 * MS,
    100 * MS,
    250 * MS,
    500 * MS,
    1_000 * MS,
    2_500 * MS,
    5_000 * MS,
    10_000 * MS,
];

/// Bucket bounds of Redis command latencies, in nanoseconds: 50 µs (a
/// command on the unix socket) to 1 s (the default command timeout).
pub const REDIS_BOUNDS: &[u64] = &[
    50 * US,
    100 * US,
    250 * US,
    500 * US,
    MS,
    2 * MS + 500 * US,
    5 * MS,
    10 * MS,
    25 * MS,
    50 * MS,
    100 * MS,
    250 * MS,
    500 * MS,
    1_000 * MS,
];

/// A histogram of durations with fixed buckets.
///
/// Each observation adds to one bucket, the sum and the count; buckets are
/// made cumulative only when rendered.
pub struct Histogram {
    /// Upper bounds in nanoseconds, ascending; one more bucket (+Inf)
    /// follows the last.
    bounds: &'static [u64],
    buckets: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: &'static [u64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        // Prometheus buckets are inclusive: `le` is "less than or equal".
        let bucket = self.bounds.partition_point(|&bound| bound < ns);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }
}

/// Error codes that get series of their own in
/// `votegraph_graphql_requests_total`; `OK` is a response without errors,
/// and any other code counts as `OTHER`. A test checks that every code of
/// `AppError` is here.
pub const CODES: &[&str] = &[
    "OK",
    "BAD_USER_INPUT",
    "UNAUTHENTICATED",
    "FORBIDDEN",
    "NOT_FOUND",
    "VOTING_CLOSED",
    "SLUG_TAKEN",
    "RATE_LIMITED",
    "INTERNAL",
    "QUERY_TOO_COMPLEX",
    "TIMEOUT",
    "BAD_REQUEST",
    "GRAPHQL_PARSE_FAILED",
    "GRAPHQL_VALIDATION_FAILED",
    "PERSISTED_QUERY_NOT_FOUND",
    "NOT_REPLICATED",
    "PAYLOAD_TOO_LARGE",
    "UNSUPPORTED_MEDIA_TYPE",
    "METHOD_NOT_ALLOWED",
    "REQUEST_TIMEOUT",
    "SERVICE_UNAVAILABLE",
    "OTHER",
];

fn code_index(code: &str) -> usize {
    CODES
        .iter()
        .position(|c| *c == code)
        .unwrap_or(CODES.len() - 1)
}

/// The kind of a GraphQL operation, as a label; `none` when the request
/// failed before an operation was chosen (malformed JSON, a syntax error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationKind {
    Query,
    Mutation,
    Subscription,
    None,
}

const KINDS: [OperationKind; 4] = [
    OperationKind::Query,
    OperationKind::Mutation,
    OperationKind::Subscription,
    OperationKind::None,
];

impl OperationKind {
    pub fn label(self) -> &'static str {
        match self {
            OperationKind::Query => "query",
            OperationKind::Mutation => "mutation",
            OperationKind::Subscription => "subscription",
            OperationKind::None => "none",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl From<OperationType> for OperationKind {
    fn from(kind: OperationType) -> Self {
        match kind {
            OperationType::Query => OperationKind::Query,
            OperationType::Mutation => OperationKind::Mutation,
            OperationType::Subscription => OperationKind::Subscription,
        }
    }
}

/// Distinct operation names with series of their own; later names count
/// as `<other>`, so a client inventing names cannot grow the output.
pub const MAX_OPERATION_NAMES: usize = 100;
/// Longer names are cut to this many bytes.
const MAX_NAME_BYTES: usize = 64;
/// Slots of the name table: a power of two, over twice the names kept,
/// so probes stay short.
const NAME_TABLE: usize = 256;

/// The series label of an operation without a name.
pub const ANONYMOUS: &str = "<anonymous>";
/// The series label of requests that failed before naming an operation.
pub const NO_OPERATION: &str = "<none>";
/// The series label shared by names past [`MAX_OPERATION_NAMES`].
pub const OTHER_OPERATIONS: &str = "<other>";

/// Request counts of one operation name, by kind and code.
struct NameSeries {
    name: Box<str>,
    counts: [Box<[AtomicU64]>; 4],
}

impl NameSeries {
    fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            counts: std::array::from_fn(|_| (0..CODES.len()).map(|_| AtomicU64::new(0)).collect()),
        }
    }
}

/// Operation names to their series: an insert-only open-addressing table
/// of [`OnceLock`]s, so a lookup takes no lock and a new name is claimed
/// with one compare-and-swap.
struct OperationNames {
    table: Box<[OnceLock<Box<NameSeries>>]>,
    /// Slots claimed (or being claimed); at most [`MAX_OPERATION_NAMES`]
    /// are ever filled.
    claimed: AtomicUsize,
    anonymous: NameSeries,
    none: NameSeries,
    other: NameSeries,
}

impl OperationNames {
    fn new() -> Self {
        Self {
            table: (0..NAME_TABLE).map(|_| OnceLock::new()).collect(),
            claimed: AtomicUsize::new(0),
            anonymous: NameSeries::new(ANONYMOUS),
            none: NameSeries::new(NO_OPERATION),
            other: NameSeries::new(OTHER_OPERATIONS),
        }
    }

    fn series(&self, name: &str) -> &NameSeries {
        let name = truncate(name, MAX_NAME_BYTES);
        let start = fnv1a(name.as_bytes()) as usize;
        for probe in 0..NAME_TABLE {
            let slot = &self.table[(start + probe) % NAME_TABLE];
            if let Some(series) = slot.get() {
                if &*series.name == name {
                    return series;
                }
                continue;
            }
            // An empty slot: the name is not in the table. Claim a place
            // first, so that at most MAX_OPERATION_NAMES slots are filled.
            if self.claimed.fetch_add(1, Ordering::AcqRel) >= MAX_OPERATION_NAMES {
                self.claimed.fetch_sub(1, Ordering::AcqRel);
                return &self.other;
            }
            let mut won = false;
            let series = slot.get_or_init(|| {
                won = true;
                Box::new(NameSeries::new(name))
            });
            if !won {
                // Another request filled this slot meanwhile.
                self.claimed.fetch_sub(1, Ordering::AcqRel);
            }
            if &*series.name == name {
                return series;
            }
        }
        &self.other
    }

    fn all(&self) -> impl Iterator<Item = &NameSeries> {
        [&self.anonymous, &self.none, &self.other]
            .into_iter()
            .chain(self.table.iter().filter_map(|s| s.get().map(|b| &**b)))
    }

    fn named(&self) -> usize {
        self.table.iter().filter(|s| s.get().is_some()).count()
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// What a GraphQL request was, as far as the metrics care.
#[derive(Debug, Clone, Default)]
pub struct Operation {
    pub kind: Option<OperationKind>,
    /// The operation's name (None: anonymous), when `kind` is known.
    pub name: Option<async_graphql::Name>,
}

impl Operation {
    /// The operation `document` runs for a request naming `requested`.
    pub fn of(kind: OperationType, document: &ExecutableDocument, requested: Option<&str>) -> Self {
        let name = match (&document.operations, requested) {
            (DocumentOperations::Single(_), _) => None,
            (DocumentOperations::Multiple(ops), Some(requested)) => {
                ops.keys().find(|n| n.as_str() == requested).cloned()
            }
            (DocumentOperations::Multiple(ops), None) => ops.keys().next().cloned(),
        };
        Self {
            kind: Some(kind.into()),
            name,
        }
    }
}

/// Routes with series of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Graphql,
    Health,
    Metrics,
    Graphiql,
    Other,
}

const ROUTES: [Route; 5] = [
    Route::Graphql,
    Route::Health,
    Route::Metrics,
    Route::Graphiql,
    Route::Other,
];

impl Route {
    pub fn of(path: &str) -> Self {
        match path {
            "/graphql" => Route::Graphql,
            "/health" => Route::Health,
            "/metrics" => Route::Metrics,
            "/" => Route::Graphiql,
            p if p.starts_with("/assets/graphiql/") => Route::Graphiql,
            _ => Route::Other,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Route::Graphql => "graphql",
            Route::Health => "health",
            Route::Metrics => "metrics",
            Route::Graphiql => "graphiql",
            Route::Other => "other",
        }
    }
}

/// Statuses counted per route: every code `http::StatusCode` can hold.
const STATUSES: std::ops::RangeInclusive<u16> = 100..=999;

struct RouteSeries {
    statuses: Box<[AtomicU64]>,
    duration: Histogram,
}

/// The HTTP and GraphQL request metrics of one server, recorded by the
/// access-log middleware (`telemetry.rs`).
pub struct RequestMetrics {
    routes: [RouteSeries; 5],
    names: OperationNames,
    graphql_duration: [Histogram; 4],
    started: SystemTime,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        Self {
            routes: std::array::from_fn(|_| RouteSeries {
                statuses: STATUSES.map(|_| AtomicU64::new(0)).collect(),
                duration: Histogram::new(REQUEST_BOUNDS),
            }),
            names: OperationNames::new(),
            graphql_duration: std::array::from_fn(|_| Histogram::new(REQUEST_BOUNDS)),
            started: SystemTime::now(),
        }
    }
}

impl RequestMetrics {
    /// One HTTP request, answered with `status` after `elapsed`.
    pub fn http(&self, route: Route, status: StatusCode, elapsed: Duration) {
        let series = &self.routes[route as usize];
        let index = usize::from(status.as_u16().saturating_sub(*STATUSES.start()));
        if let Some(count) = series.statuses.get(index) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        series.duration.observe(elapsed);
    }

    /// One GraphQL request over HTTP: its operation, the code of its first
    /// error (`OK` without errors) and its time.
    pub fn graphql(&self, operation: &Operation, code: &str, elapsed: Duration) {
        let kind = operation.kind.unwrap_or(OperationKind::None);
        let series = match (&operation.kind, &operation.name) {
            (None, _) => &self.names.none,
            (Some(_), None) => &self.names.anonymous,
            (Some(_), Some(name)) => self.names.series(name.as_str()),
        };
        series.counts[kind.index()][code_index(code)].fetch_add(1, Ordering::Relaxed);
        self.graphql_duration[kind.index()].observe(elapsed);
    }

    /// Operation names with series of their own so far.
    pub fn operation_names(&self) -> usize {
        self.names.named()
    }
}

/// The Prometheus text format, written family by family.
#[derive(Default)]
pub struct Exposition(String);

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn labels(&mut self, labels: &[(&str, &str)]) {
        if labels.is_empty() {
            return;
        }
        self.0.push('{');
        for (i, (key, value)) in labels.iter().enumerate() {
            if i > 0 {
                self.0.push(',');
            }
            self.0.push_str(key);
            self.0.push_str("=\"");
            for c in value.chars() {
                match c {
                    '\\' => self.0.push_str("\\\\"),
                    '"' => self.0.push_str("\\\""),
                    '\n' => self.0.push_str("\\n"),
                    c => self.0.push(c),
                }
            }
            self.0.push('"');
        }
        self.0.push('}');
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Into<f64>) {
        self.0.push_str(name);
        self.labels(labels);
        let value: f64 = value.into();
        if value.is_nan() {
            self.0.push_str(" NaN\n");
        } else if value.is_infinite() {
            self.0
                .push_str(if value > 0.0 { " +Inf\n" } else { " -Inf\n" });
        } else {
            let _ = writeln!(self.0, " {value}");
        }
    }

    fn count(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.0.push_str(name);
        self.labels(labels);
        let _ = writeln!(self.0, " {value}");
    }

    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let mut cumulative = 0;
        let bucket = format!("{name}_bucket");
        for (i, count) in h.buckets.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let le = match h.bounds.get(i) {
                Some(&ns) => (ns as f64 / 1e9).to_string(),
                None => "+Inf".to_owned(),
            };
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.count(&bucket, &with_le, cumulative);
        }
        let sum = h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        self.sample(&format!("{name}_sum"), labels, sum);
        // The +Inf bucket's value, so the two always agree.
        self.count(&format!("{name}_count"), labels, cumulative);
    }

    pub fn finish(self) -> String {
        self.0
    }
}

/// What `/metrics` reads: the request metrics and the parts that keep
/// their own counters and sizes.
#[derive(Clone)]
pub struct Scrape {
    pub requests: Arc<RequestMetrics>,
    pub api: Api,
    pub sockets: WebSockets,
    /// Serve anyone (a listener of its own, `--metrics-bind`), rather than
    /// only direct loopback clients.
    pub open: bool,
    /// On the API port: whether to serve direct loopback clients at all.
    /// Behind trusted proxies a local proxy may forward the internet
    /// without saying so, so there the API port serves `/metrics` only
    /// when told to (`--metrics-on-api-port`).
    pub on_api_port: bool,
}

impl Scrape {
    /// Every metric, in the text format.
    pub fn render(&self) -> String {
        let mut out = Exposition::default();
        self.render_requests(&mut out);
        self.render_redis(&mut out);
        self.render_caches(&mut out);
        self.render_live(&mut out);
        self.render_budget(&mut out);
        render_process(&mut out, self.requests.started);
        out.finish()
    }

    fn render_requests(&self, out: &mut Exposition) {
        let requests = &self.requests;
        out.family(
            "votegraph_http_requests_total",
            Kind::Counter,
            "HTTP requests answered, by route and status (WebSocket upgrades answer 101).",
        );
        for route in ROUTES {
            let series = &requests.routes[route as usize];
            for (i, count) in series.statuses.iter().enumerate() {
                let n = count.load(Ordering::Relaxed);
                if n > 0 {
                    let status = (*STATUSES.start() as usize + i).to_string();
                    out.count(
                        "votegraph_http_requests_total",
                        &[("route", route.label()), ("status", &status)],
                        n,
                    );
                }
            }
        }
        out.family(
            "votegraph_http_request_duration_seconds",
            Kind::Histogram,
            "Time from a request's arrival to its response, by route.",
        );
        for route in ROUTES {
            out.histogram(
                "votegraph_http_request_duration_seconds",
                &[("route", route.label())],
                &requests.routes[route as usize].duration,
            );
        }
        out.family(
            "votegraph_graphql_requests_total",
            Kind::Counter,
            "GraphQL requests over HTTP, by operation type, operation name (the first 100 distinct names; later ones are <other>) and the code of the first error (OK: none).",
        );
        for series in requests.names.all() {
            for kind in KINDS {
                for (i, count) in series.counts[kind.index()].iter().enumerate() {
                    let n = count.load(Ordering::Relaxed);
                    if n > 0 {
                        out.count(
                            "votegraph_graphql_requests_total",
                            &[
                                ("type", kind.label()),
                                ("operation", &series.name),
                                ("code", CODES[i]),
                            ],
                            n,
                        );
                    }
                }
            }
        }
        out.family(
            "votegraph_graphql_request_duration_seconds",
            Kind::Histogram,
            "Time to answer a GraphQL request over HTTP, by operation type.",
        );
        for kind in KINDS {
            out.histogram(
                "votegraph_graphql_request_duration_seconds",
                &[("type", kind.label())],
                &requests.graphql_duration[kind.index()],
            );
        }
    }

    fn render_redis(&self, out: &mut Exposition) {
        let state = self.api.state();
        let store = state.store();
        let redis = store.redis_metrics();
        out.family(
            "votegraph_redis_command_duration_seconds",
            Kind::Histogram,
            "Time from sending a Redis command (or a pipeline, as one) to its reply.",
        );
        out.histogram(
            "votegraph_redis_command_duration_seconds",
            &[("kind", "command")],
            &redis.commands,
        );
        out.histogram(
            "votegraph_redis_command_duration_seconds",
            &[("kind", "pipeline")],
            &redis.pipelines,
        );
        out.family(
            "votegraph_redis_errors_total",
            Kind::Counter,
            "Failed Redis commands: connection (broken or refused), timeout, reply (an error reply from Redis), other.",
        );
        for (kind, n) in redis.errors() {
            out.count("votegraph_redis_errors_total", &[("kind", kind)], n);
        }
        if state.replica().is_some() {
            let lag = state.replica_lag();
            out.family(
                "votegraph_redis_replica_lag_bytes",
                Kind::Gauge,
                "Bytes of replication stream the read replica has not applied yet (-1: unknown), measured every second.",
            );
            out.sample("votegraph_redis_replica_lag_bytes", &[], lag.bytes() as f64);
            out.family(
                "votegraph_redis_replica_link_up",
                Kind::Gauge,
                "1 when the read replica's link to the primary is up.",
            );
            out.count(
                "votegraph_redis_replica_link_up",
                &[],
                u64::from(lag.link_up()),
            );
        }
        let pool = store.pool_state();
        let stats = &pool.statistics;
        out.family(
            "votegraph_redis_pool_connections",
            Kind::Gauge,
            "Open pooled Redis connections (each one multiplexed by every request).",
        );
        out.count(
            "votegraph_redis_pool_connections",
            &[],
            u64::from(pool.connections),
        );
        out.family(
            "votegraph_redis_pool_idle_connections",
            Kind::Gauge,
            "Pooled connections not checked out at this moment.",
        );
        out.count(
            "votegraph_redis_pool_idle_connections",
            &[],
            u64::from(pool.idle_connections),
        );
        out.family(
            "votegraph_redis_pool_max_connections",
            Kind::Gauge,
            "The pool's size (--pool-size).",
        );
        out.count(
            "votegraph_redis_pool_max_connections",
            &[],
            u64::from(store.pool_size()),
        );
        out.family(
            "votegraph_redis_pool_checkouts_total",
            Kind::Counter,
            "Connection checkouts: direct (one was ready), waited, timed_out (the request failed with storage unavailable).",
        );
        for (outcome, n) in [
            ("direct", stats.get_direct),
            ("waited", stats.get_waited),
            ("timed_out", stats.get_timed_out),
        ] {
            out.count(
                "votegraph_redis_pool_checkouts_total",
                &[("outcome", outcome)],
                n,
            );
        }
        out.family(
            "votegraph_redis_pool_connections_created_total",
            Kind::Counter,
            "Redis connections the pool dialled.",
        );
        out.count(
            "votegraph_redis_pool_connections_created_total",
            &[],
            stats.connections_created,
        );
        out.family(
            "votegraph_redis_pool_connections_closed_broken_total",
            Kind::Counter,
            "Pooled connections dropped because they broke (a Redis restart, a network fault).",
        );
        out.count(
            "votegraph_redis_pool_connections_closed_broken_total",
            &[],
            stats.connections_closed_broken,
        );
    }

    fn render_caches(&self, out: &mut Exposition) {
        let number = |v: &serde_json::Value, key: &str| v[key].as_u64().unwrap_or(0);
        let responses = self.api.state().responses().map(|c| c.stats());
        out.family(
            "votegraph_response_cache_requests_total",
            Kind::Counter,
            "Lookups in the anonymous response cache, by result (hit, miss).",
        );
        let stats = responses.unwrap_or_default();
        for (label, key) in [("hit", "hits"), ("miss", "misses")] {
            out.count(
                "votegraph_response_cache_requests_total",
                &[("result", label)],
                number(&stats, key),
            );
        }
        for (name, key, kind, help) in [
            (
                "votegraph_response_cache_entries",
                "entries",
                Kind::Gauge,
                "Responses in the anonymous response cache.",
            ),
            (
                "votegraph_response_cache_bytes",
                "bytes",
                Kind::Gauge,
                "Bytes the anonymous response cache holds (bodies, keys and indexes).",
            ),
            (
                "votegraph_response_cache_max_bytes",
                "maxBytes",
                Kind::Gauge,
                "The response cache's byte budget (--response-cache-bytes; 0: no cache).",
            ),
            (
                "votegraph_response_cache_invalidations_total",
                "invalidations",
                Kind::Counter,
                "Writes other than votes that emptied the response cache.",
            ),
            (
                "votegraph_response_cache_evicted_by_votes_total",
                "evictedByVotes",
                Kind::Counter,
                "Cached responses dropped because a vote could change them.",
            ),
        ] {
            out.family(name, kind, help);
            out.count(name, &[], number(&stats, key));
        }
        let documents = self.api.guard().document_stats();
        out.family(
            "votegraph_document_cache_requests_total",
            Kind::Counter,
            "Lookups in the parsed-document cache, by result (hit, miss).",
        );
        for (label, key) in [("hit", "hits"), ("miss", "misses")] {
            out.count(
                "votegraph_document_cache_requests_total",
                &[("result", label)],
                number(&documents, key),
            );
        }
        out.family(
            "votegraph_document_cache_entries",
            Kind::Gauge,
            "Parsed documents kept.",
        );
        out.count(
            "votegraph_document_cache_entries",
            &[],
            number(&documents, "entries"),
        );
        out.family(
            "votegraph_document_cache_text_bytes",
            Kind::Gauge,
            "Bytes of query text the parsed-document cache holds.",
        );
        out.count(
            "votegraph_document_cache_text_bytes",
            &[],
            number(&documents, "textBytes"),
        );
    }

    fn render_live(&self, out: &mut Exposition) {
        let pubsub = self.api.state().pubsub();
        out.family(
            "votegraph_websocket_connections",
            Kind::Gauge,
            "Open GraphQL WebSocket connections.",
        );
        out.count(
            "votegraph_websocket_connections",
            &[],
            self.sockets.open_connections() as u64,
        );
        let sessions = self.sockets.sessions();
        out.family(
            "votegraph_websocket_logins",
            Kind::Gauge,
            "Distinct login sessions of open WebSocket connections, watched so that they close when the login ends.",
        );
        out.count(
            "votegraph_websocket_logins",
            &[],
            sessions.sessions() as u64,
        );
        out.family(
            "votegraph_websocket_login_ended_closes_total",
            Kind::Counter,
            "WebSocket connections closed (4403) because their login ended: logOut, expiry or revocation.",
        );
        out.count(
            "votegraph_websocket_login_ended_closes_total",
            &[],
            sessions.ended_sockets(),
        );
        out.family(
            "votegraph_subscriptions",
            Kind::Gauge,
            "Live GraphQL subscriptions in this process.",
        );
        out.count("votegraph_subscriptions", &[], pubsub.subscribers() as u64);
        let stats = pubsub.stats();
        for (name, kind, help, value) in [
            (
                "votegraph_pubsub_events_total",
                Kind::Counter,
                "Events received from Redis pub/sub (score changes and new posts).",
                stats.events(),
            ),
            (
                "votegraph_pubsub_malformed_events_total",
                Kind::Counter,
                "Pub/sub messages that were not score-change events (dropped).",
                stats.malformed(),
            ),
            (
                "votegraph_pubsub_reconnections_total",
                Kind::Counter,
                "Times the pub/sub connection was subscribed again after it dropped.",
                stats.reconnections(),
            ),
            (
                "votegraph_pubsub_connection_failures_total",
                Kind::Counter,
                "Failed attempts to connect or subscribe to pub/sub.",
                stats.failures(),
            ),
            (
                "votegraph_pubsub_connected",
                Kind::Gauge,
                "1 while the pub/sub connection is subscribed, else 0.",
                u64::from(stats.connected()),
            ),
        ] {
            out.family(name, kind, help);
            out.count(name, &[], value);
        }
    }
}

impl Scrape {
    fn render_budget(&self, out: &mut Exposition) {
        let budget = self.api.budget();
        let stats = budget.stats();
        for (name, kind, help, value) in [
            (
                "votegraph_work_budget_units",
                Kind::Gauge,
                "The work budget (--work-budget), in query-cost units.",
                budget.settings().capacity,
            ),
            (
                "votegraph_work_in_flight_units",
                Kind::Gauge,
                "Query-cost units held by admitted queries and mutations now.",
                stats.in_use(),
            ),
            (
                "votegraph_work_waiting_requests",
                Kind::Gauge,
                "Requests waiting for room in the work budget now.",
                stats.waiting(),
            ),
            (
                "votegraph_work_admitted_total",
                Kind::Counter,
                "Queries and mutations admitted to run.",
                stats.admitted(),
            ),
            (
                "votegraph_work_waited_total",
                Kind::Counter,
                "Queries and mutations admitted after waiting for room.",
                stats.waited(),
            ),
            (
                "votegraph_work_refused_total",
                Kind::Counter,
                "Requests refused with SERVICE_UNAVAILABLE: no room in the work budget in time.",
                stats.refused(),
            ),
        ] {
            out.family(name, kind, help);
            out.count(name, &[], value);
        }
    }
}

fn render_process(out: &mut Exposition, started: SystemTime) {
    out.family(
        "votegraph_build_info",
        Kind::Gauge,
        "Always 1; the version is a label.",
    );
    out.count(
        "votegraph_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    out.family(
        "process_start_time_seconds",
        Kind::Gauge,
        "When the server started, in Unix seconds.",
    );
    let start = started
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    out.sample("process_start_time_seconds", &[], start);
    if let Some(bytes) = resident_bytes() {
        out.family(
            "process_resident_memory_bytes",
            Kind::Gauge,
            "Resident memory of the server process.",
        );
        out.count("process_resident_memory_bytes", &[], bytes);
    }
}

/// Resident memory from `/proc/self/statm` (Linux; None elsewhere).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Whether `/metrics` on the API's port answers this request: only a
/// client on this machine (a loopback peer) that did not come through a
/// proxy. A proxy on the same host connects from loopback too, but it adds
/// `X-Forwarded-For` or `Forwarded` (the nginx example in deploy/nginx/ does), so
/// the internet does not reach the metrics through it.
pub fn serves(peer: Option<IpAddr>, headers: &poem::http::HeaderMap) -> bool {
    let direct = !["x-forwarded-for", "forwarded", "x-real-ip"]
        .iter()
        .any(|h| headers.contains_key(*h));
    direct && peer.is_some_and(|ip| ip.is_loopback() || is_mapped_loopback(ip))
}

fn is_mapped_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        IpAddr::V4(_) => false,
    }
}

/// `GET /metrics`.
#[handler]
pub async fn metrics(req: &Request, scrape: Data<&Scrape>) -> Response {
    let peer = req.remote_addr().as_socket_addr().map(|a| a.ip());
    let allowed = scrape.open || (scrape.on_api_port && serves(peer, req.headers()));
    if !allowed {
        // As if there were no such route: nothing to learn from outside.
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .content_type("application/json")
            .body(AppError::NotFound("not found".to_owned()).to_json_body());
    }
    Response::builder()
        .header(header::CONTENT_TYPE, CONTENT_TYPE)
        .header(header::CACHE_CONTROL, "no-store")
        .body(scrape.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_inclusive() {
        let h = Histogram::new(&[MS, 10 * MS]);
        h.observe(Duration::from_millis(1));
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_secs(1));
        let mut out = Exposition::default();
        out.histogram("t", &[("a", "b")], &h);
        let text = out.finish();
        assert!(
            text.contains("t_bucket{a=\"b\",le=\"0.001\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("t_bucket{a=\"b\",le=\"0.01\"} 2\n"), "{text}");
        assert!(text.contains("t_bucket{a=\"b\",le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("t_count{a=\"b\"} 3\n"), "{text}");
        assert!(text.contains("t_sum{a=\"b\"} 1.006\n"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = Exposition::default();
        out.count("m", &[("l", "a\"b\\c\nd")], 1);
        assert_eq!(out.finish(), "m{l=\"a\\\"b\\\\c\\nd\"} 1\n");
    }

    #[test]
    fn operation_names_are_bounded() {
        let names = OperationNames::new();
        for i in 0..1000 {
            names.series(&format!("Op{i}"));
        }
        assert_eq!(names.named(), MAX_OPERATION_NAMES);
        // The first names keep their own series, later ones share <other>.
        assert_eq!(&*names.series("Op0").name, "Op0");
        assert_eq!(&*names.series("Op99").name, "Op99");
        assert_eq!(&*names.series("Op100").name, OTHER_OPERATIONS);
        // Long names are cut, so they cannot bloat the output either.
        let long = "N".repeat(10_000);
        let names = OperationNames::new();
        assert_eq!(names.series(&long).name.len(), MAX_NAME_BYTES);
    }

    #[test]
    fn concurrent_new_names_stay_within_the_bound() {
        let names = Arc::new(OperationNames::new());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let names = names.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        // Threads share half of their names.
                        let name = format!("Op{}", if i % 2 == 0 { i } else { i * 10 + t });
                        let series = names.series(&name);
                        assert!(*series.name == name || &*series.name == OTHER_OPERATIONS);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(names.named(), MAX_OPERATION_NAMES);
        let mut seen: Vec<&str> = names.all().map(|s| &*s.name).collect();
        let all = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), all, "no name has two series");
    }

    #[test]
    fn every_error_code_has_a_series() {
        let source = include_str!("error.rs");
        let codes: Vec<&str> = source
            .split("=> \"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .filter(|code| {
                !code.is_empty() && code.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            })
            .collect();
        assert!(codes.len() > 10, "{codes:?}");
        for code in codes {
            assert!(CODES.contains(&code), "{code} is missing from CODES");
        }
    }

    #[test]
    fn only_direct_loopback_clients_read_metrics_on_the_api_port() {
        let none = poem::http::HeaderMap::new();
        let mut proxied = poem::http::HeaderMap::new();
        proxied.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
        assert!(serves(Some([127, 0, 0, 1].into()), &none));
        assert!(serves(Some("::1".parse().unwrap()), &none));
        assert!(serves(Some("::ffff:127.0.0.1".parse().unwrap()), &none));
        assert!(!serves(Some([10, 0, 0, 1].into()), &none));
        assert!(!serves(Some([127, 0, 0, 1].into()), &proxied));
        assert!(!serves(None, &none));
    }
}
