//! The route tree of the API port: GraphQL over HTTP (the contract is in
//! docs/api.md), the WebSocket upgrade, `/health`, `/metrics` and GraphiQL.

mod body;
mod cache_headers;
mod graphql;
mod health;
mod negotiate;
mod response;

use std::sync::Arc;

use poem::endpoint::BoxEndpoint;
use poem::error::{MethodNotAllowedError, NotFoundError};
use poem::{get, EndpointExt, Route};

pub use body::BodyLimits;
pub use health::Draining;

use crate::client_addr::TrustedProxies;
use crate::cors::{self, Cors};
use crate::error::AppError;
use crate::graphiql;
use crate::graphql::Api;
use crate::metrics;
use crate::telemetry::{self, RequestMetrics};
use crate::ws::WebSockets;

pub struct Served {
    pub api: Api,
    pub sockets: WebSockets,
    pub metrics: metrics::Endpoint,
    pub trusted: TrustedProxies,
    pub body_limits: BodyLimits,
    pub draining: Draining,
    pub cors: Cors,
    pub requests: Arc<RequestMetrics>,
}

/// The route tree of the API port, behind CORS and the access log.
pub fn routes(served: Served) -> BoxEndpoint<'static> {
    let (requests, cors) = (served.requests, Arc::new(served.cors));
    Route::new()
        .at("/", get(graphiql::page))
        .at("/assets/graphiql/:file", get(graphiql::asset))
        .at(
            "/graphql",
            get(graphql::graphql_get)
                .post(graphql::graphql_post)
                .around(graphql::graphql_other_methods),
        )
        .at("/health", get(health::health))
        .at("/metrics", get(metrics::metrics))
        .data(served.metrics)
        .data(served.trusted)
        .data(served.body_limits)
        .data(served.sockets)
        .data(served.draining)
        .data(served.api)
        .catch_error(async |_: NotFoundError| response::error_response(AppError::UnknownPath))
        .catch_error(async |_: MethodNotAllowedError| response::error_response(AppError::GetOnly))
        .around(move |endpoint, req| cors::cors(endpoint, req, cors.clone()))
        .around(move |endpoint, req| telemetry::access_log(endpoint, req, requests.clone()))
        .boxed()
}
