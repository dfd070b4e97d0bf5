//! What `/metrics` reads from each part's own stats at a scrape, and the
//! recorded metrics' registration: the whole list in one place.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::graphql::Api;
use crate::telemetry::RequestMetrics;
use crate::ws::WebSockets;
use votegraph_domain::metrics::{resident_bytes, MetricsBuilder, Readings};

pub fn register(
    metrics: &mut MetricsBuilder,
    requests: &RequestMetrics,
    api: &Api,
    sockets: &WebSockets,
) {
    requests.register(metrics);
    api.state.store.redis_metrics().register(metrics);
    let api = api.clone();
    let sockets = sockets.clone();
    let started = SystemTime::now();
    metrics.read(move |r| {
        redis(r, &api);
        outboxes(r, &api);
        caches(r, &api);
        live(r, &api, &sockets);
        budget(r, &api);
        process(r, started);
    });
}

fn redis(r: &mut Readings<'_>, api: &Api) {
    let state = &api.state;
    if state.replica.is_some() {
        let lag = &state.replica_lag;
        r.gauge(
            "votegraph_redis_replica_lag_bytes",
            "Bytes of replication stream the read replica has not applied yet (-1: unknown), measured every second.",
            lag.bytes() as f64,
        );
        r.gauge(
            "votegraph_redis_replica_link_up",
            "1 when the read replica's link to the primary is up.",
            f64::from(u8::from(lag.link_up())),
        );
    }
    let store = &state.store;
    let pool = store.pool_state();
    let stats = &pool.statistics;
    r.gauge(
        "votegraph_redis_pool_connections",
        "Open pooled Redis connections (each one multiplexed by every request).",
        f64::from(pool.connections),
    );
    r.gauge(
        "votegraph_redis_pool_idle_connections",
        "Pooled connections not checked out at this moment.",
        f64::from(pool.idle_connections),
    );
    r.gauge(
        "votegraph_redis_pool_max_connections",
        "The pool's size (--pool-size).",
        f64::from(store.pool_size()),
    );
    r.counters(
        "votegraph_redis_pool_checkouts",
        "Connection checkouts: direct (one was ready), waited, timed_out (the request failed with storage unavailable).",
        &[
            (&[("outcome", "direct")], stats.get_direct),
            (&[("outcome", "waited")], stats.get_waited),
            (&[("outcome", "timed_out")], stats.get_timed_out),
        ],
    );
    r.counter(
        "votegraph_redis_pool_connections_created",
        "Redis connections the pool dialled.",
        stats.connections_created,
    );
    r.counter(
        "votegraph_redis_pool_connections_closed_broken",
        "Pooled connections dropped because they broke (a Redis restart, a network fault).",
        stats.connections_closed_broken,
    );
}

/// Each shard's outbox, in the cluster layout (see `store/outbox.rs`).
fn outboxes(r: &mut Readings<'_>, api: &Api) {
    let Some(held) = api.state.store.outbox_entries() else {
        return;
    };
    let shards: Vec<String> = (0..held.len()).map(|s| s.to_string()).collect();
    let labels: Vec<[(&str, &str); 1]> = shards.iter().map(|s| [("shard", s.as_str())]).collect();
    let samples: Vec<_> = labels
        .iter()
        .zip(&held)
        .map(|(l, &n)| (&l[..], n as f64))
        .collect();
    r.gauges(
        "votegraph_outbox_entries",
        "Entries each shard's outbox held when this instance last drained it; the shard's writes are refused while it holds --outbox-max-entries.",
        &samples,
    );
}

fn caches(r: &mut Readings<'_>, api: &Api) {
    let responses = api
        .state
        .responses
        .as_ref()
        .map(|cache| cache.stats())
        .unwrap_or_default();
    r.counters(
        "votegraph_response_cache_requests",
        "Lookups in the anonymous response cache, by result (hit, miss).",
        &[
            (&[("result", "hit")], responses.hits),
            (&[("result", "miss")], responses.misses),
        ],
    );
    r.gauge(
        "votegraph_response_cache_entries",
        "Responses in the anonymous response cache.",
        responses.entries as f64,
    );
    r.gauge(
        "votegraph_response_cache_bytes",
        "Bytes the anonymous response cache holds (bodies, keys and indexes).",
        responses.bytes as f64,
    );
    r.gauge(
        "votegraph_response_cache_max_bytes",
        "The response cache's byte budget (--response-cache-bytes; 0: no cache).",
        responses.max_bytes as f64,
    );
    r.counter(
        "votegraph_response_cache_invalidations",
        "Writes other than votes that emptied the response cache.",
        responses.invalidations,
    );
    r.counter(
        "votegraph_response_cache_evicted_by_votes",
        "Cached responses dropped because a vote could change them.",
        responses.evicted_by_votes,
    );
    let documents = api.guard.documents.stats();
    r.counters(
        "votegraph_document_cache_requests",
        "Lookups in the parsed-document cache, by result (hit, miss).",
        &[
            (&[("result", "hit")], documents.hits),
            (&[("result", "miss")], documents.misses),
        ],
    );
    r.gauge(
        "votegraph_document_cache_entries",
        "Parsed documents kept.",
        documents.entries as f64,
    );
    r.gauge(
        "votegraph_document_cache_text_bytes",
        "Bytes of query text the parsed-document cache holds.",
        documents.text_bytes as f64,
    );
}

fn live(r: &mut Readings<'_>, api: &Api, sockets: &WebSockets) {
    let sessions = &sockets.sessions;
    r.gauge(
        "votegraph_websocket_connections",
        "Open GraphQL WebSocket connections.",
        sockets.connections.total() as f64,
    );
    r.gauge(
        "votegraph_websocket_logins",
        "Distinct login sessions of open WebSocket connections, watched so that they close when the login ends.",
        sessions.sessions() as f64,
    );
    r.counter(
        "votegraph_websocket_login_ended_closes",
        "WebSocket connections closed (4403) because their login ended: logOut, expiry or revocation.",
        sessions.ended_sockets(),
    );
    let pubsub = &api.state.pubsub;
    r.gauge(
        "votegraph_subscriptions",
        "Live GraphQL subscriptions in this process.",
        pubsub.subscribers() as f64,
    );
    let stats = pubsub.stats();
    r.counter(
        "votegraph_pubsub_events",
        "Events received from Redis pub/sub (score changes and new posts).",
        stats.events.load(Relaxed),
    );
    r.counter(
        "votegraph_pubsub_malformed_events",
        "Pub/sub messages that were not score-change events (dropped).",
        stats.malformed.load(Relaxed),
    );
    r.counter(
        "votegraph_pubsub_reconnections",
        "Times the pub/sub connection was subscribed again after it dropped.",
        stats.subscribed.load(Relaxed).saturating_sub(1),
    );
    r.counter(
        "votegraph_pubsub_connection_failures",
        "Failed attempts to connect or subscribe to pub/sub.",
        stats.failures.load(Relaxed),
    );
    r.gauge(
        "votegraph_pubsub_connected",
        "1 while the pub/sub connection is subscribed, else 0.",
        f64::from(u8::from(stats.connected.load(Relaxed))),
    );
}

fn budget(r: &mut Readings<'_>, api: &Api) {
    let stats = api.budget.stats();
    r.gauge(
        "votegraph_work_budget_units",
        "The work budget (--work-budget), in query-cost units.",
        stats.capacity as f64,
    );
    r.gauge(
        "votegraph_work_in_flight_units",
        "Query-cost units held by admitted queries and mutations now.",
        stats.in_use as f64,
    );
    r.gauge(
        "votegraph_work_waiting_requests",
        "Requests waiting for room in the work budget now.",
        stats.waiting as f64,
    );
    r.counter(
        "votegraph_work_admitted",
        "Queries and mutations admitted to run.",
        stats.admitted,
    );
    r.counter(
        "votegraph_work_waited",
        "Queries and mutations admitted after waiting for room.",
        stats.waited,
    );
    r.counter(
        "votegraph_work_refused",
        "Requests refused with SERVICE_UNAVAILABLE: no room in the work budget in time.",
        stats.refused,
    );
}

fn process(r: &mut Readings<'_>, started: SystemTime) {
    r.gauges(
        "votegraph_build_info",
        "Always 1; the version is a label.",
        &[(&[("version", env!("CARGO_PKG_VERSION"))], 1.0)],
    );
    let start = started
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    r.gauge(
        "process_start_time_seconds",
        "When the server started, in Unix seconds.",
        start,
    );
    if let Some(bytes) = resident_bytes() {
        r.gauge(
            "process_resident_memory_bytes",
            "Resident memory of the server process.",
            bytes as f64,
        );
    }
}
