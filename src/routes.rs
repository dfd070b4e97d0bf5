//! HTTP endpoints: GraphQL over HTTP, GraphiQL and the health check.

use std::time::Duration;

use async_graphql::http::GraphiQLSource;
use async_graphql_poem::{GraphQLRequest, GraphQLResponse};
use poem::http::{header, HeaderMap, StatusCode};
use poem::web::{Data, Html};
use poem::{handler, IntoResponse, Response};

use crate::auth::Session;
use crate::graphql::{request_data, AppSchema};
use crate::store::Store;

/// `POST /graphql` and `GET /graphql?query=…`.
#[handler]
pub async fn graphql(
    schema: Data<&AppSchema>,
    store: Data<&Store>,
    headers: &HeaderMap,
    request: GraphQLRequest,
) -> GraphQLResponse {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let request = request_data(&store, Session::from_authorization(auth)).attach(request.0);
    schema.execute(request).await.into()
}

/// `GET /`: GraphiQL, talking to `/graphql`.
#[handler]
pub async fn graphiql() -> Html<String> {
    Html(
        GraphiQLSource::build()
            .endpoint("/graphql")
            .title("votegraph")
            .finish(),
    )
}

/// `GET /health`: 200 when Redis answers PING, 503 otherwise.
#[handler]
pub async fn health(store: Data<&Store>) -> Response {
    match tokio::time::timeout(Duration::from_secs(2), store.ping()).await {
        Ok(Ok(())) => "ok".into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "health check: redis unavailable");
            (StatusCode::SERVICE_UNAVAILABLE, "redis unavailable").into_response()
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "redis timed out").into_response(),
    }
}
