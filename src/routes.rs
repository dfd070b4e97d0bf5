//! HTTP endpoints: GraphQL over HTTP, GraphiQL and the health check.

use std::sync::Arc;
use std::time::Duration;

use async_graphql::http::{WebSocketProtocols, WsMessage, ALL_WEBSOCKET_PROTOCOLS};
use async_graphql::Executor;
use async_graphql_poem::{GraphQLProtocol, GraphQLRequest, GraphQLResponse};
use futures_util::{SinkExt, StreamExt};
use poem::http::{header, HeaderMap, StatusCode};
use poem::web::websocket::{Message, WebSocket, WebSocketConfig, WebSocketStream};
use poem::web::{Data, Json};
use poem::{handler, Body, FromRequest, IntoResponse, Request, RequestBody, Response};

use crate::auth::Session;
use crate::cache::{is_query, DocumentCache, ResponseCache};
use crate::client::{ClientAddr, TrustedProxies};
use crate::graphql::{recorded_request_data, request_data, Api};
use crate::pubsub::PubSub;
use crate::store::Store;

/// How often an idle WebSocket gets a keep-alive.
#[derive(Clone, Copy, Debug)]
pub struct KeepAlive(pub Duration);

/// `GET /graphql`: a WebSocket upgrade for subscriptions, or a query in the
/// URL (`?query=…`) like `POST`.
#[handler]
pub async fn graphql_get(
    req: &Request,
    body: Body,
    schema: Data<&Api>,
    store: Data<&Store>,
    caches: Data<&Arc<Caches>>,
    keep_alive: Data<&KeepAlive>,
    trusted: Data<&TrustedProxies>,
) -> poem::Result<Response> {
    let client = client_addr(req, &trusted);
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let mut body = RequestBody::new(body);
    if !upgrade {
        let request = GraphQLRequest::from_request(req, &mut body).await?;
        return Ok(execute(&schema, &store, &caches, req.headers(), client, request).await);
    }
    let websocket = WebSocket::from_request(req, &mut body).await?;
    let protocol = GraphQLProtocol::from_request(req, &mut body).await?;
    let (schema, store, keep_alive) = (schema.clone(), store.clone(), *keep_alive.0);
    // Non-browser clients may authenticate the upgrade itself; browsers use
    // the `connection_init` payload.
    let header_auth = authorization(req.headers()).map(str::to_owned);
    Ok(websocket
        .config(websocket_config())
        .protocols(ALL_WEBSOCKET_PROTOCOLS)
        .on_upgrade(move |socket| {
            serve_websocket(
                socket,
                schema,
                store,
                protocol,
                header_auth,
                client,
                keep_alive,
            )
        })
        .into_response())
}

/// Small buffers: a subscription connection reads a few small messages and
/// writes small events, and tungstenite's defaults (128 KiB each way) would
/// cost ~250 KiB per subscriber. Writing stops past 1 MiB pending, which
/// bounds what a stalled client can hold.
fn websocket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(4 * 1024)
        .max_write_buffer_size(1024 * 1024)
}

/// Runs one GraphQL WebSocket connection (`graphql-transport-ws` or the
/// legacy `graphql-ws`) until either side closes it.
///
/// Like async-graphql-poem's own loop, plus keep-alives: `{"type":"ka"}`
/// for the legacy protocol, which clients expect, and WebSocket pings for
/// the new one. Writing waits for the client, so a client that stops reading
/// stops only its own subscriptions, which then skip what they miss.
async fn serve_websocket(
    socket: WebSocketStream,
    schema: Api,
    store: Store,
    protocol: GraphQLProtocol,
    header_auth: Option<String>,
    client: ClientAddr,
    keep_alive: KeepAlive,
) {
    let (mut sink, stream) = socket.split();
    let incoming = stream
        .take_while(|msg| futures_util::future::ready(msg.is_ok()))
        .filter_map(|msg| {
            futures_util::future::ready(match msg {
                Ok(msg) if msg.is_text() || msg.is_binary() => Some(msg.into_bytes()),
                _ => None,
            })
        });
    let outgoing = async_graphql::http::WebSocket::new(schema, incoming, protocol.0)
        .on_connection_init(move |payload| async move {
            let auth = payload_authorization(&payload).or(header_auth);
            Ok(
                request_data(&store, Session::from_authorization(auth.as_deref()), client)
                    .into_connection_data(),
            )
        })
        .map(|msg| match msg {
            WsMessage::Text(text) => Message::Text(text),
            WsMessage::Close(code, reason) => Message::close_with(code, reason),
        });
    futures_util::pin_mut!(outgoing);
    let mut keep_alive =
        tokio::time::interval_at(tokio::time::Instant::now() + keep_alive.0, keep_alive.0);
    loop {
        let message = tokio::select! {
            next = outgoing.next() => match next {
                Some(message) => message,
                None => break,
            },
            _ = keep_alive.tick() => match protocol.0 {
                WebSocketProtocols::SubscriptionsTransportWS => Message::Text(r#"{"type":"ka"}"#.into()),
                _ => Message::Ping(Vec::new()),
            },
        };
        if sink.send(message).await.is_err() {
            break;
        }
    }
}

/// `Authorization` from a `connection_init` payload, in any letter case.
fn payload_authorization(payload: &serde_json::Value) -> Option<String> {
    payload
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .and_then(|(_, v)| v.as_str())
        .map(str::to_owned)
}

/// The request's client address: its socket peer, or what a trusted proxy
/// says (see [`crate::client`]).
fn client_addr(req: &Request, trusted: &TrustedProxies) -> ClientAddr {
    let peer = req.remote_addr().as_socket_addr().map(|addr| addr.ip());
    ClientAddr::resolve(peer, req.headers(), trusted)
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
    client: ClientAddr,
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
            let data = recorded_request_data(store, Session::from_authorization(None), client);
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
    let request = request_data(store, Session::from_authorization(auth), client).attach(request);
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
    trusted: Data<&TrustedProxies>,
    req: &Request,
    request: GraphQLRequest,
) -> Response {
    let client = client_addr(req, &trusted);
    execute(&schema, &store, &caches, req.headers(), client, request).await
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
