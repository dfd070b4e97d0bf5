//! `/graphql` over HTTP: `POST`, `GET` with the query in the URL (or a
//! WebSocket upgrade), and a JSON `405` for any other method.

use std::sync::Arc;

use poem::http::{header, HeaderMap, Method};
use poem::web::Data;
use poem::{handler, Body, Endpoint, IntoResponse, Request, RequestBody, Response};

use super::body::{request_from_body, BodyLimits};
use super::negotiate::{Media, Wants};
use super::response::{error_response, held, refusal, reply, request_error};
use crate::client_addr::{ClientAddr, TrustedProxies};
use crate::error::AppError;
use crate::graphql::Api;
use crate::pipeline::{self, PipelineRequest, ResponseContent};
use crate::telemetry;
use crate::ws::WebSockets;

/// Asks for `extensions.cost` in the response (any value).
pub const COST_HEADER: &str = "x-query-cost";

/// `POST /graphql`.
#[handler]
pub async fn graphql_post(
    schema: Data<&Api>,
    limits: Data<&BodyLimits>,
    trusted: Data<&TrustedProxies>,
    req: &Request,
    body: Body,
) -> Response {
    let headers = req.headers();
    let client = client_addr(req, &trusted);
    match request_from_body(headers, body, *limits.0).await {
        Ok(named) => execute(&schema, headers, client, Method::POST, named).await,
        Err(e) => refusal(e, Media::of(headers)),
    }
}

/// `GET /graphql`: a WebSocket upgrade for subscriptions, or a query in the
/// URL (`?query=…`, or only a persisted query's hash) like `POST`.
#[handler]
pub async fn graphql_get(
    req: &Request,
    body: Body,
    schema: Data<&Api>,
    trusted: Data<&TrustedProxies>,
    sockets: Data<&WebSockets>,
) -> Response {
    let client = client_addr(req, &trusted);
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if upgrade {
        let header_auth = authorization(req.headers()).map(str::to_owned);
        let mut body = RequestBody::new(body);
        return sockets
            .upgrade(&schema, req, &mut body, client, header_auth)
            .await
            .unwrap_or_else(error_response);
    }
    match request_from_url(req.uri().query().unwrap_or("")) {
        Ok(named) => execute(&schema, req.headers(), client, Method::GET, named).await,
        Err(e) => refusal(e, Media::of(req.headers())),
    }
}

/// Any other method on `/graphql`: a JSON `405` (poem's is plain text).
pub async fn graphql_other_methods<E: Endpoint>(
    endpoint: Arc<E>,
    req: Request,
) -> poem::Result<Response> {
    if matches!(*req.method(), Method::GET | Method::POST | Method::HEAD) {
        return endpoint.call(req).await.map(IntoResponse::into_response);
    }
    Ok(error_response(AppError::UnsupportedMethod))
}

/// The request's client address (see [`crate::client_addr`]).
fn client_addr(req: &Request, trusted: &TrustedProxies) -> ClientAddr {
    let peer = req.remote_addr().as_socket_addr().map(|addr| addr.ip());
    ClientAddr::resolve(peer, req.headers(), trusted)
}

fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// Runs `request` through the pipeline and answers as the client asked.
async fn execute(
    schema: &Api,
    headers: &HeaderMap,
    client: ClientAddr,
    method: Method,
    (request, document_id): (async_graphql::Request, Option<String>),
) -> Response {
    let wants = Wants::of(headers);
    let ask = PipelineRequest {
        request,
        document_id,
        authorization: authorization(headers).map(str::to_owned),
        client,
        queries_only: method == Method::GET,
        with_cost: headers.contains_key(COST_HEADER),
    };
    let answer = pipeline::run(schema, ask).await;
    if let Some(operation) = answer.operation {
        telemetry::note_operation(operation);
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
            let public = anonymous && method == Method::GET;
            let entry = cached.as_ref().map(|(cache, key)| (&**cache, key.as_str()));
            held(reply(headers, wants, &body, entry, public), permit)
        }
    }
}

/// The request a GET's query string holds, with the `documentId` it names.
fn request_from_url(query: &str) -> Result<(async_graphql::Request, Option<String>), AppError> {
    let mut request = async_graphql::Request::new(String::new());
    let (mut has_query, mut document_id) = (false, None);
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "query" => {
                request.query = value.into_owned();
                has_query = true;
            }
            "operationName" if !value.is_empty() => {
                request.operation_name = Some(value.into_owned())
            }
            "variables" if !value.is_empty() => request.variables = object("variables", &value)?,
            "extensions" if !value.is_empty() => request.extensions = object("extensions", &value)?,
            "documentId" => {
                let id = serde_json::Value::String(value.into_owned());
                document_id = crate::trusted::document_id(Some(&id))?;
            }
            _ => {}
        }
    }
    let named = document_id.is_some() || request.extensions.contains_key("persistedQuery");
    if !has_query && !named {
        return Err(AppError::BadRequest(
            "the query parameter is missing".to_owned(),
        ));
    }
    Ok((request, document_id))
}

/// The JSON object a query string's parameter `name` holds.
fn object<T: serde::de::DeserializeOwned>(name: &str, value: &str) -> Result<T, AppError> {
    let object = serde_json::from_str(value);
    object.map_err(|_| AppError::BadRequest(format!("{name} must be a JSON object")))
}
