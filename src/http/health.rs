//! `GET /health`, for load balancers and operators.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use poem::http::StatusCode;
use poem::web::{Data, Json};
use poem::{handler, IntoResponse, Response};

use crate::graphql::Api;
use crate::ws::WebSockets;

/// How long `/health` waits for Redis to answer PING.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Set when the server was told to stop and is serving out its grace
/// period (`--shutdown-grace-ms`): `/health` answers 503 `draining` so load
/// balancers send new requests elsewhere before the listener closes.
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

/// `GET /health`: 200 when Redis answers PING, 503 otherwise (and
/// `draining` while the server stops); the body also tells how many
/// subscriptions this process is serving.
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
    let redis = match tokio::time::timeout(PING_TIMEOUT, schema.state.store.ping()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".to_owned()),
    };
    let body = report(&schema, &ws, redis.is_ok());
    match redis {
        Ok(()) => Json(body).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "health check: redis unavailable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

/// The body of `/health`: Redis' status and what each part reports.
fn report(schema: &Api, ws: &WebSockets, redis_ok: bool) -> serde_json::Value {
    let state = &schema.state;
    serde_json::json!({
        "status": if redis_ok { "ok" } else { "unavailable" },
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
