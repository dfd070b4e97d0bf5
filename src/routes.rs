//! HTTP endpoints: GraphQL over HTTP, GraphiQL and the health check.

use std::time::Duration;

use async_graphql::http::ALL_WEBSOCKET_PROTOCOLS;
use async_graphql::parser::types::OperationType;
use async_graphql_poem::GraphQLProtocol;
use poem::http::{header, HeaderMap, StatusCode};
use poem::web::websocket::WebSocket;
use poem::web::{Data, Json};
use poem::{handler, Body, FromRequest, IntoResponse, Request, RequestBody, Response};
use tokio::io::AsyncReadExt;
use tracing::Instrument;

use crate::auth::Session;
use crate::cache::Flight;
use crate::client::{ClientAddr, TrustedProxies};
use crate::error::AppError;
use crate::graphql::{Api, RequestContext};
use crate::metrics::Operation;
use crate::telemetry;
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
    trusted: Data<&TrustedProxies>,
    sockets: Data<&WebSockets>,
) -> poem::Result<Response> {
    let client = client_addr(req, &trusted);
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let mut body = RequestBody::new(body);
    if !upgrade {
        let request = match request_from_url(req.uri().query().unwrap_or("")) {
            Ok(request) => request,
            Err(e) => return Ok(error_response(e)),
        };
        return Ok(execute(&schema, req.headers(), client, Method::Get, request).await);
    }
    let websocket = WebSocket::from_request(req, &mut body).await?;
    let protocol = GraphQLProtocol::from_request(req, &mut body).await?;
    let Some(slot) = sockets.admit(Some(client.ip())) else {
        return Ok(error_response(AppError::TooManyConnections {
            websocket: true,
            retry_after_secs: CONNECTION_RETRY_AFTER_SECS,
        }));
    };
    // Non-browser clients may authenticate the upgrade itself; browsers use
    // the `connection_init` payload.
    let header_auth = authorization(req.headers()).map(str::to_owned);
    let connection = sockets.connection(schema.clone(), protocol.0, header_auth, client, slot);
    // The connection outlives the request; its log lines keep the
    // request's span (and request id).
    let span = tracing::Span::current();
    Ok(websocket
        .config(sockets.config())
        .protocols(ALL_WEBSOCKET_PROTOCOLS)
        .on_upgrade(move |socket| connection.run(socket).instrument(span))
        .into_response())
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

/// How much of a request body the server reads, and for how long.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub timeout: Duration,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Post,
}

/// Asks for `extensions.cost` in the response (any value).
pub const COST_HEADER: &str = "x-query-cost";

async fn execute(
    schema: &Api,
    headers: &HeaderMap,
    client: ClientAddr,
    method: Method,
    mut request: async_graphql::Request,
) -> Response {
    let checked = match schema.guard().check(&request) {
        Ok(checked) => checked,
        Err(e) => return error_response(e),
    };
    let (operation, cost) = match &checked {
        Some(c) => (Some(c.operation), Some(c.cost)),
        None => (None, None),
    };
    if let Some(c) = &checked {
        telemetry::note_operation(Operation::of(
            c.operation,
            &c.document,
            request.operation_name.as_deref(),
        ));
    }
    if method == Method::Get && operation.is_some_and(|op| op != OperationType::Query) {
        // A GET must be safe: a link prefetcher must not vote.
        return error_response(AppError::MethodNotAllowed);
    }
    let want_cost = headers.contains_key(COST_HEADER);
    let auth = authorization(headers);
    // Anonymous queries may be answered from (and stored in) the cache.
    let cache = match (auth, schema.state().responses(), operation, want_cost) {
        (None, Some(cache), Some(OperationType::Query), false) => Some(cache),
        _ => None,
    };
    let mut stored = None;
    if let Some(cache) = cache {
        let key = cache_key(&request);
        if let Some(body) = cache.get(&key) {
            return json(body);
        }
        let lead = match cache.flight(&key) {
            Flight::Lead(lead) => Some(lead),
            Flight::Follow(follow) => match follow.wait(schema.deadline()).await {
                Some(body) => return json(body),
                None => None,
            },
        };
        stored = Some((cache, key, cache.position(), lead));
    }
    // The parsed document is cloned only here, on the way to execution: a
    // response-cache hit never pays for it.
    if let Some(checked) = checked {
        request.set_parsed_query(checked.document.as_ref().clone());
    }
    let session = Session::from_authorization(auth);
    let context = match stored {
        Some(_) => RequestContext::recorded(schema.state(), session, client),
        None => RequestContext::new(schema.state(), session, client),
    };
    let (request, recorded) = context.attach(request);
    let mut response = schema.execute_checked(request).await;
    telemetry::note_response(&response);
    if let (true, Some(cost)) = (want_cost, cost) {
        response.extensions.insert(
            "cost".to_owned(),
            async_graphql::Value::from_json(serde_json::json!({
                "requested": cost,
                "limit": schema.guard().limits().max_cost,
            }))
            .unwrap_or_default(),
        );
    }
    let body = bytes::Bytes::from(serde_json::to_vec(&response).unwrap_or_default());
    if let Some((cache, key, start, lead)) = stored {
        if let (true, Some(deps)) = (response.is_ok(), recorded.take()) {
            cache.put(key, start, deps, body.clone());
        }
        if let Some(lead) = lead {
            lead.land(body.clone());
        }
    }
    json(body)
}

/// A request that fails before execution: a JSON GraphQL error (no `data`
/// key: nothing ran) with its code and HTTP status, `Allow` after a `405`
/// and `Retry-After` when the error says when to try again.
pub fn error_response(error: AppError) -> Response {
    telemetry::note_code(error.code());
    let mut response = Response::builder()
        .status(error.http_status())
        .content_type("application/json");
    if matches!(error, AppError::MethodNotAllowed) {
        response = response.header(header::ALLOW, "POST");
    }
    if let Some(secs) = error.retry_after() {
        response = response.header(header::RETRY_AFTER, secs);
    }
    response.body(error.to_json_body())
}

/// A GraphQL request from a GET URL's query string.
fn request_from_url(query: &str) -> Result<async_graphql::Request, AppError> {
    let mut request = async_graphql::Request::new(String::new());
    let mut has_query = false;
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "query" => {
                request.query = value.into_owned();
                has_query = true;
            }
            "operationName" if !value.is_empty() => {
                request.operation_name = Some(value.into_owned())
            }
            "variables" if !value.is_empty() => {
                request.variables = serde_json::from_str(&value).map_err(|_| {
                    AppError::BadRequest("variables must be a JSON object".to_owned())
                })?;
            }
            "extensions" if !value.is_empty() => {
                request.extensions = serde_json::from_str(&value).map_err(|_| {
                    AppError::BadRequest("extensions must be a JSON object".to_owned())
                })?;
            }
            _ => {}
        }
    }
    if !has_query {
        return Err(AppError::BadRequest(
            "the query parameter is missing".to_owned(),
        ));
    }
    Ok(request)
}

/// Reads a POST body: JSON only, bounded in size and time.
async fn request_from_body(
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
    let bytes = match tokio::time::timeout(limits.timeout, read).await {
        Err(_) => return Err(AppError::RequestTimeout),
        Ok(Err(poem::error::ReadBodyError::PayloadTooLarge)) => {
            drain(reader, limits.timeout).await;
            return Err(too_large);
        }
        Ok(Err(_)) => {
            return Err(AppError::BadRequest(
                "the request body could not be read".to_owned(),
            ))
        }
        Ok(Ok(bytes)) => bytes,
    };
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|_| AppError::BadRequest("the request body is not valid JSON".to_owned()))?;
    if value.is_array() {
        return Err(AppError::BadRequest(
            "batched requests are not supported: send one operation per request".to_owned(),
        ));
    }
    if !value.get("query").is_some_and(serde_json::Value::is_string) {
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

/// Bodies over the limit but at most this long are read and thrown away
/// before the `413` goes out: a client still sending when the server closes
/// gets a TCP reset, which destroys the answer it was about to read. Longer
/// ones (a 500 MB upload) are cut at once.
const DRAIN_BYTES: u64 = 16 * 1024 * 1024;

async fn drain(reader: impl tokio::io::AsyncRead + Unpin, timeout: Duration) {
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
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
    limit: usize,
) -> Result<bytes::Bytes, poem::error::ReadBodyError> {
    let mut data = bytes::BytesMut::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Ok(data.freeze());
        }
        if data.len() + n > limit {
            return Err(poem::error::ReadBodyError::PayloadTooLarge);
        }
        data.extend_from_slice(&buf[..n]);
    }
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
    limits: Data<&BodyLimits>,
    trusted: Data<&TrustedProxies>,
    req: &Request,
    body: Body,
) -> Response {
    let headers = req.headers();
    let client = client_addr(req, &trusted);
    match request_from_body(headers, body, *limits.0).await {
        Ok(request) => execute(&schema, headers, client, Method::Post, request).await,
        Err(e) => error_response(e),
    }
}

/// `GET /health`: 200 when Redis answers PING, 503 otherwise; the body
/// also tells how many subscriptions this process is serving.
#[handler]
pub async fn health(schema: Data<&Api>) -> Response {
    let state = schema.state();
    let redis = match tokio::time::timeout(Duration::from_secs(2), state.store().ping()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".to_owned()),
    };
    let body = serde_json::json!({
        "status": if redis.is_ok() { "ok" } else { "unavailable" },
        "subscriptions": state.pubsub().subscribers(),
        "responseCache": state.responses().map(|c| c.stats()),
        "documentCache": schema.guard().document_stats(),
    });
    match redis {
        Ok(()) => Json(body).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "health check: redis unavailable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}
