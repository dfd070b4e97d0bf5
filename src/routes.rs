//! HTTP endpoints: GraphQL over HTTP, GraphiQL and the health check.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_graphql::http::ALL_WEBSOCKET_PROTOCOLS;
use async_graphql::Executor;
use async_graphql_poem::{GraphQLProtocol, GraphQLRequest, GraphQLResponse};
use poem::http::{header, HeaderMap, StatusCode};
use poem::web::websocket::WebSocket;
use poem::web::{Data, Json};
use poem::{handler, Body, FromRequest, IntoResponse, Request, RequestBody, Response};

use crate::auth::Session;
use crate::cache::{is_query, DocumentCache, ResponseCache};
use crate::error::{server_error, AppError};
use crate::graphql::{recorded_request_data, request_data, Api};
use crate::pubsub::PubSub;
use crate::store::Store;
use crate::ws::WebSockets;

/// Seconds a client refused for holding too many WebSockets is told to
/// wait: a slot frees only when one of its sockets closes, so this just
/// keeps a reconnecting client from hammering.
const CONNECTION_RETRY_AFTER_SECS: u64 = 5;

/// `GET /graphql`: a WebSocket upgrade for subscriptions, or a query in the
/// URL (`?query=…`) like `POST`.
#[handler]
pub async fn graphql_get(
    req: &Request,
    body: Body,
    schema: Data<&Api>,
    store: Data<&Store>,
    caches: Data<&Arc<Caches>>,
    sockets: Data<&WebSockets>,
) -> poem::Result<Response> {
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let mut body = RequestBody::new(body);
    if !upgrade {
        let request = GraphQLRequest::from_request(req, &mut body).await?;
        return Ok(execute(&schema, &store, &caches, req.headers(), request).await);
    }
    let websocket = WebSocket::from_request(req, &mut body).await?;
    let protocol = GraphQLProtocol::from_request(req, &mut body).await?;
    let Some(slot) = sockets.admit(client_ip(req)) else {
        return Ok(too_many_connections());
    };
    // Non-browser clients may authenticate the upgrade itself; browsers use
    // the `connection_init` payload.
    let header_auth = authorization(req.headers()).map(str::to_owned);
    let connection =
        sockets.connection(schema.clone(), store.clone(), protocol.0, header_auth, slot);
    Ok(websocket
        .config(sockets.config())
        .protocols(ALL_WEBSOCKET_PROTOCOLS)
        .on_upgrade(move |socket| connection.run(socket))
        .into_response())
}

/// The address WebSocket connections are counted by.
fn client_ip(req: &Request) -> Option<IpAddr> {
    req.remote_addr().as_socket_addr().map(|a| a.ip())
}

/// HTTP 429 with a GraphQL error body, as GraphQL clients read errors.
fn too_many_connections() -> Response {
    let error = server_error(AppError::TooManyConnections {
        retry_after_secs: CONNECTION_RETRY_AFTER_SECS,
    });
    let body = serde_json::json!({ "errors": [error] });
    Response::builder()
        .status(StatusCode::TOO_MANY_REQUESTS)
        .content_type("application/json")
        .header(header::RETRY_AFTER, CONNECTION_RETRY_AFTER_SECS)
        .body(body.to_string())
}

fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// The per-process caches of the HTTP path.
pub struct Caches {
    /// Whole anonymous responses, when enabled.
    pub responses: Option<Arc<ResponseCache>>,
    pub documents: DocumentCache,
}

async fn execute(
    schema: &Api,
    store: &Store,
    caches: &Caches,
    headers: &HeaderMap,
    request: GraphQLRequest,
) -> Response {
    let auth = authorization(headers);
    let mut request = request.0;
    let document = caches.documents.get(&request.query);
    if let (None, Some(cache), Some(doc)) = (auth, &caches.responses, &document) {
        if is_query(doc, request.operation_name.as_deref()) {
            let key = cache_key(&request);
            if let Some(body) = cache.get(&key) {
                return json(body);
            }
            let start = cache.position();
            request.set_parsed_query(doc.as_ref().clone());
            let data = recorded_request_data(store, Session::from_authorization(None));
            let deps = data.deps.clone().unwrap_or_default();
            let response = schema.execute(data.attach(request)).await;
            let body = bytes::Bytes::from(serde_json::to_vec(&response).unwrap_or_default());
            if response.is_ok() {
                let deps = std::mem::take(&mut *deps.lock().unwrap_or_else(|p| p.into_inner()));
                cache.put(key, start, deps, body.clone());
            }
            return json(body);
        }
    }
    if let Some(doc) = document {
        request.set_parsed_query(doc.as_ref().clone());
    }
    let request = request_data(store, Session::from_authorization(auth)).attach(request);
    GraphQLResponse::from(schema.execute(request).await).into_response()
}

fn cache_key(request: &async_graphql::Request) -> String {
    format!(
        "{}\u{0}{}\u{0}{}",
        request.query,
        request.operation_name.as_deref().unwrap_or(""),
        serde_json::to_string(&request.variables).unwrap_or_default()
    )
}

fn json(body: bytes::Bytes) -> Response {
    Response::builder()
        .content_type("application/json")
        .body(body)
}

/// `POST /graphql`.
#[handler]
pub async fn graphql(
    schema: Data<&Api>,
    store: Data<&Store>,
    caches: Data<&Arc<Caches>>,
    headers: &HeaderMap,
    request: GraphQLRequest,
) -> Response {
    execute(&schema, &store, &caches, headers, request).await
}

/// `GET /health`: 200 when Redis answers PING, 503 otherwise; the body
/// also tells how many subscriptions this process is serving.
#[handler]
pub async fn health(
    store: Data<&Store>,
    pubsub: Data<&PubSub>,
    caches: Data<&Arc<Caches>>,
) -> Response {
    let redis = match tokio::time::timeout(Duration::from_secs(2), store.ping()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".to_owned()),
    };
    let body = serde_json::json!({
        "status": if redis.is_ok() { "ok" } else { "unavailable" },
        "subscriptions": pubsub.subscribers(),
        "responseCache": caches.responses.as_ref().map(|c| c.stats()),
    });
    match redis {
        Ok(()) => Json(body).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "health check: redis unavailable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}
