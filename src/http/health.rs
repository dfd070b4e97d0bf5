//! `GET /health`, for load balancers and operators.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use poem::http::StatusCode;
use poem::web::{Data, Json};
use poem::{handler, IntoResponse, Response};

use crate::graphql::Api;
use crate::ws::WebSockets;

/// How long `/health` waits for each shard's primary to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Set during the shutdown grace period, when `/health` answers 503
/// `draining` so load balancers send new requests elsewhere.
#[derive(Clone, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    pub fn start(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// `GET /health`: 200 while Redis answers, else 503, with what each part
/// reports. On a cluster, some shards silent is `degraded` but 200: every
/// instance shares them, so none should leave its load balancer for it.
#[handler]
pub async fn health(
    schema: Data<&Api>,
    ws: Data<&WebSockets>,
    draining: Data<&Draining>,
) -> Response {
    if draining.is_on() {
        let body = serde_json::json!({ "status": "draining" });
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    let (answering, shards) = schema.state.store.shards_answering(PROBE_TIMEOUT).await;
    let status = match answering {
        0 => "unavailable",
        n if n < shards => "degraded",
        _ => "ok",
    };
    if answering < shards {
        tracing::warn!(answering, shards, "health check: redis does not answer");
    }
    let body = report(&schema, &ws, status, (answering, shards));
    match answering {
        0 => (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response(),
        _ => Json(body).into_response(),
    }
}

/// The body of `/health`: Redis' status and what each part reports.
fn report(
    schema: &Api,
    ws: &WebSockets,
    status: &str,
    (answering, shards): (usize, usize),
) -> serde_json::Value {
    let state = &schema.state;
    let cluster = state.store.layout().is_cluster();
    serde_json::json!({
        "status": status,
        // The shards whose primary answers a read.
        "shards": cluster.then(|| serde_json::json!({ "answering": answering, "of": shards })),
        "subscriptions": state.pubsub.subscribers(),
        "sharedSubscriptions": ws.shared.stats(),
        "responseCache": state.responses.as_ref().map(|c| c.stats()),
        "documentCache": schema.guard.documents.stats(),
        "persistedQueries": state.persisted.stats(),
        // Following other clients' writes (the book's code): notifications
        // "on", or "refused" / "down" while the sweep alone follows them
        // (see docs/operations.md), and the queue of what waits.
        "deriver": state.store.deriver_stats(),
        // Measured every second; lagBytes -1 until known.
        "replica": state.replica.as_ref().map(|replica| serde_json::json!({
            "address": replica.address(),
            "linkUp": state.replica_lag.link_up(),
            "lagBytes": state.replica_lag.bytes(),
        })),
    })
}
