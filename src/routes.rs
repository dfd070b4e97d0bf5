//! HTTP endpoints: GraphQL over HTTP, the WebSocket upgrade and the
//! health check.
//!
//! The HTTP contract (see docs/api.md, "The HTTP contract"): media types
//! negotiated from `Accept`, a JSON GraphQL error with a code for every
//! refusal, automatic persisted queries (`persisted.rs`), caching headers
//! (`Cache-Control`, `ETag`, `304`) and compression by `Accept-Encoding`.

use std::sync::Arc;
use std::time::Duration;

use async_graphql::http::ALL_WEBSOCKET_PROTOCOLS;
use async_graphql_poem::GraphQLProtocol;
use poem::http::{header, HeaderMap, StatusCode};
use poem::web::websocket::WebSocket;
use poem::web::{Data, Json};
use poem::{handler, Body, Endpoint, FromRequest, IntoResponse, Request, RequestBody, Response};
use tokio::io::AsyncReadExt;
use tracing::Instrument;

use crate::budget::{HeldBody, Permit};
use crate::cache::{Cached, ResponseCache};
use crate::client_addr::{ClientAddr, TrustedProxies};
use crate::compression::{self, Encoding};
use crate::error::AppError;
use crate::graphql::Api;
use crate::pipeline::{self, PipelineRequest, ResponseContent};
use crate::telemetry;
use crate::telemetry::Operation;
use crate::ws::WebSockets;

/// Seconds a client refused for holding too many WebSockets is told to
/// wait: a slot frees only when one of its sockets closes, so this just
/// keeps a reconnecting client from hammering.
const CONNECTION_RETRY_AFTER_SECS: u64 = 5;

/// `GET /graphql`: a WebSocket upgrade for subscriptions, or a query in the
/// URL (`?query=…`, or only a persisted query's hash) like `POST`.
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
            Err(e) => return Ok(refusal(e, Media::of(req.headers()))),
        };
        return Ok(execute(&schema, req.headers(), client, Method::Get, request).await);
    }
    // Checked before the upgrade, so a client that forgot the subprotocol
    // reads why instead of an empty 400.
    let Ok(protocol) = GraphQLProtocol::from_request(req, &mut body).await else {
        return Ok(error_response(AppError::BadRequest(
            "a GraphQL WebSocket needs the subprotocol graphql-transport-ws (or the legacy graphql-ws) in Sec-WebSocket-Protocol".to_owned(),
        )));
    };
    let Ok(websocket) = WebSocket::from_request(req, &mut body).await else {
        return Ok(error_response(AppError::BadRequest(
            "not a valid WebSocket upgrade: Sec-WebSocket-Key and Sec-WebSocket-Version: 13 are required".to_owned(),
        )));
    };
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

/// Any other method on `/graphql`: a JSON `405` naming the methods it
/// serves (poem's own is plain text).
pub async fn graphql_other_methods<E: Endpoint>(
    endpoint: Arc<E>,
    req: Request,
) -> poem::Result<Response> {
    use poem::http::Method as M;
    if matches!(*req.method(), M::GET | M::POST | M::HEAD) {
        return endpoint.call(req).await.map(IntoResponse::into_response);
    }
    Ok(error_response(AppError::UnsupportedMethod))
}

/// The request's client address: its socket peer, or what a trusted proxy
/// says (see [`crate::client_addr`]).
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

/// The media type of the GraphQL-over-HTTP spec, answered when asked for.
pub const GRAPHQL_RESPONSE_JSON: &str = "application/graphql-response+json";

/// `Cache-Control` of an anonymous `GET` query answered without errors: a
/// CDN or browser may reuse it for as long as votegraph's own response
/// cache would (1 s), and serve it up to 10 s stale while it fetches a
/// fresh one in the background.
pub const PUBLIC_CACHE_CONTROL: &str = "public, max-age=1, stale-while-revalidate=10";
/// `Cache-Control` of everything else on `/graphql`: logged-in answers,
/// mutations, `POST`s, errors.
pub const PRIVATE_CACHE_CONTROL: &str = "private, no-store";
/// The request headers a `/graphql` answer depends on (CORS adds `Origin`).
const VARY: &str = "Accept, Accept-Encoding, Authorization, X-Query-Cost";

/// The media type a response is sent as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Media {
    /// `application/json`: the default, and what a client that does not
    /// name `application/graphql-response+json` gets. Requests that fail
    /// before execution answer `200` (the spec's legacy rules), with no
    /// `data` key.
    Json,
    /// `application/graphql-response+json`: a response without `data`
    /// answers `4xx`/`5xx` (see [`AppError::graphql_response_status`]).
    GraphqlResponse,
}

impl Media {
    /// From `Accept`: `application/graphql-response+json` when it is
    /// listed with a `q` at least that of `application/json` (or of a
    /// wildcard); `application/json` otherwise, including without `Accept`.
    pub fn of(headers: &HeaderMap) -> Self {
        let (mut graphql_q, mut json_q) = (0.0f32, 0.0f32);
        for value in headers.get_all(header::ACCEPT) {
            let Ok(value) = value.to_str() else { continue };
            for item in value.split(',') {
                let mut parts = item.split(';');
                let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
                let q = parts
                    .filter_map(|p| p.split_once('='))
                    .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                    .map(|(_, v)| v.trim().parse::<f32>().unwrap_or(0.0))
                    .unwrap_or(1.0);
                match media.as_str() {
                    GRAPHQL_RESPONSE_JSON => graphql_q = graphql_q.max(q),
                    "application/json" | "application/*" | "*/*" => json_q = json_q.max(q),
                    _ => {}
                }
            }
        }
        if graphql_q > 0.0 && graphql_q >= json_q {
            Media::GraphqlResponse
        } else {
            Media::Json
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Media::Json => "application/json",
            Media::GraphqlResponse => GRAPHQL_RESPONSE_JSON,
        }
    }

    fn status(self, error: &AppError) -> StatusCode {
        match self {
            Media::Json => error.http_status(),
            Media::GraphqlResponse => error.graphql_response_status(),
        }
    }
}

/// What the client asked for: a media type and a content coding.
#[derive(Clone, Copy, Debug)]
struct Wants {
    media: Media,
    encoding: Option<Encoding>,
}

impl Wants {
    fn of(headers: &HeaderMap) -> Self {
        Self {
            media: Media::of(headers),
            encoding: Encoding::negotiate(headers, &Encoding::ALL),
        }
    }
}

async fn execute(
    schema: &Api,
    headers: &HeaderMap,
    client: ClientAddr,
    method: Method,
    request: async_graphql::Request,
) -> Response {
    let wants = Wants::of(headers);
    let ask = PipelineRequest {
        request,
        authorization: authorization(headers).map(str::to_owned),
        client,
        queries_only: method == Method::Get,
        with_cost: headers.contains_key(COST_HEADER),
    };
    let answer = pipeline::run(schema, ask).await;
    if let Some((kind, name)) = answer.operation {
        telemetry::note_operation(Operation {
            kind: Some(kind.into()),
            name,
        });
    }
    if let Some(code) = answer.code {
        telemetry::note_code(code);
    }
    match answer.outcome {
        ResponseContent::Refused(e) => refusal(e, wants.media),
        ResponseContent::RequestError(response) => request_error(&response, wants.media),
        ResponseContent::Body {
            body,
            cached,
            anonymous,
            permit,
        } => {
            // Only an anonymous GET query may be kept by shared HTTP caches.
            let public = anonymous && method == Method::Get;
            let entry = cached.as_ref().map(|(cache, key)| (&**cache, key.as_str()));
            let response = reply(headers, wants, &body, entry, public);
            match permit {
                Some(permit) => held(response, permit),
                None => response,
            }
        }
    }
}

/// `response` with its body holding `permit` until it is written.
fn held(response: Response, permit: Permit) -> Response {
    type BoxBody = http_body_util::combinators::BoxBody<bytes::Bytes, std::io::Error>;
    let (parts, body) = response.into_parts();
    let body = BoxBody::new(HeldBody::new(BoxBody::from(body), permit));
    Response::from_parts(parts, Body::from(body))
}

/// The answer to a request that failed before execution: its errors
/// without `data`, `400` under `application/graphql-response+json`.
fn request_error(response: &async_graphql::Response, media: Media) -> Response {
    #[derive(serde::Serialize)]
    struct WithoutData<'a> {
        errors: &'a [async_graphql::ServerError],
        #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        extensions: &'a std::collections::BTreeMap<String, async_graphql::Value>,
    }
    let body = serde_json::to_string(&WithoutData {
        errors: &response.errors,
        extensions: &response.extensions,
    })
    .unwrap_or_default();
    let status = match media {
        Media::Json => StatusCode::OK,
        Media::GraphqlResponse => StatusCode::BAD_REQUEST,
    };
    Response::builder()
        .status(status)
        .content_type(media.content_type())
        .header(header::CACHE_CONTROL, PRIVATE_CACHE_CONTROL)
        .header(header::VARY, VARY)
        .body(body)
}

/// A response body as `wants` asks: its media type, compressed above
/// [`compression::MIN_BYTES`] when the client accepts a coding (a cached
/// response's compressed form is kept with it, see
/// [`ResponseCache::encoded`]), and its caching headers. A `public`
/// response without errors gets [`PUBLIC_CACHE_CONTROL`] and an `ETag`, and
/// a matching `If-None-Match` gets `304` without a body; everything else
/// is [`PRIVATE_CACHE_CONTROL`].
fn reply(
    headers: &HeaderMap,
    wants: Wants,
    cached: &Arc<Cached>,
    entry: Option<(&ResponseCache, &str)>,
    public: bool,
) -> Response {
    let public = public && cached.ok();
    let compressed = wants
        .encoding
        .filter(|_| cached.body().len() >= compression::MIN_BYTES)
        .and_then(|encoding| {
            let form = match entry {
                Some((cache, key)) => cache.encoded(key, cached, encoding),
                None => encoding.compress(cached.body(), compression::Level::Fast),
            };
            form.map(|form| (encoding, form))
        });
    let mut response = Response::builder().header(header::VARY, VARY);
    if public {
        let etag = etag(
            cached.tag(),
            wants.media,
            compressed.as_ref().map(|(e, _)| *e),
        );
        response = response
            .header(header::CACHE_CONTROL, PUBLIC_CACHE_CONTROL)
            .header(header::ETAG, &etag);
        if if_none_match(headers, &etag) {
            return response.status(StatusCode::NOT_MODIFIED).finish();
        }
    } else {
        response = response.header(header::CACHE_CONTROL, PRIVATE_CACHE_CONTROL);
    }
    response = response.content_type(wants.media.content_type());
    match compressed {
        Some((encoding, form)) => response
            .header(header::CONTENT_ENCODING, encoding.name())
            .body(form),
        None => response.body(cached.body().clone()),
    }
}

/// A strong validator per representation: the body's tag, plus what makes
/// this representation differ from the others of the same body (media
/// type, content coding).
fn etag(tag: &str, media: Media, encoding: Option<Encoding>) -> String {
    let media = match media {
        Media::Json => "",
        Media::GraphqlResponse => ".gr",
    };
    let encoding = encoding
        .map(|e| format!(".{}", e.name()))
        .unwrap_or_default();
    format!("\"{tag}{media}{encoding}\"")
}

/// Whether `If-None-Match` names `etag` (or is `*`), compared weakly as
/// the header's semantics require for `GET`.
fn if_none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim())
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

/// A request that fails before any GraphQL execution: a JSON GraphQL
/// error (no `data` key: nothing ran) with its code and the HTTP status for
/// `media`, `Allow` after a `405` and `Retry-After` when the error says
/// when to try again.
fn refusal(error: AppError, media: Media) -> Response {
    telemetry::note_code(error.code().as_str());
    let mut response = Response::builder()
        .status(media.status(&error))
        .content_type(media.content_type())
        .header(header::CACHE_CONTROL, PRIVATE_CACHE_CONTROL)
        .header(header::VARY, VARY);
    match error {
        AppError::MethodNotAllowed => response = response.header(header::ALLOW, "POST"),
        AppError::UnsupportedMethod => response = response.header(header::ALLOW, "GET, POST"),
        _ => {}
    }
    if let Some(secs) = error.retry_after() {
        response = response.header(header::RETRY_AFTER, secs);
    }
    response.body(error.into_json_body())
}

/// [`refusal`] as `application/json`, for answers outside the GraphQL
/// exchange (WebSocket upgrades, other methods).
pub fn error_response(error: AppError) -> Response {
    refusal(error, Media::Json)
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
    if !has_query && !request.extensions.contains_key("persistedQuery") {
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
    // Only an automatic persisted query may leave the text out.
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
        Err(e) => refusal(e, Media::of(headers)),
    }
}

/// Set when the server was told to stop and is serving out its grace
/// period (`--shutdown-grace-ms`): `/health` answers 503 `draining` so load
/// balancers send new requests elsewhere before the listener closes.
#[derive(Clone, Default)]
pub struct Draining(Arc<std::sync::atomic::AtomicBool>);

impl Draining {
    pub fn start(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn is_on(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
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
    let state = schema.state();
    let redis = match tokio::time::timeout(Duration::from_secs(2), state.store().ping()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".to_owned()),
    };
    let body = serde_json::json!({
        "status": if redis.is_ok() { "ok" } else { "unavailable" },
        "subscriptions": state.pubsub().subscribers(),
        "sharedSubscriptions": ws.shared_stats(),
        "responseCache": state.responses().map(|c| c.stats()),
        "documentCache": schema.guard().document_stats(),
        "persistedQueries": state.persisted().stats(),
        // Following other clients' writes (the book's code): notifications
        // "on", or "refused" / "down" while the sweep alone follows them
        // (see docs/operations.md), and the queue of what waits.
        "deriver": state.store().deriver_stats(),
        // Measured every second; lagBytes -1 until known.
        "replica": state.replica().map(|replica| serde_json::json!({
            "address": replica.address(),
            "linkUp": state.replica_lag().link_up(),
            "lagBytes": state.replica_lag().bytes(),
        })),
    });
    match redis {
        Ok(()) => Json(body).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "health check: redis unavailable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}
