//! GraphiQL, served by votegraph so it works offline: the page and its
//! vendored scripts and styles (`assets/graphiql/README.md`) are compiled
//! in. Subscriptions go over a WebSocket on `/graphql`, which reads
//! `Authorization` from GraphiQL's headers editor.

use poem::http::{header, HeaderMap, StatusCode};
use poem::web::{Html, Path};
use poem::{handler, Response};
use tokio::sync::OnceCell;

use crate::compression::{Encoding, Level};
use crate::error::AppError;

/// Bumped with the vendored files, so browsers may cache them for long.
const ASSET_VERSION: &str = "3.8.3-1";

/// A vendored file: its name and bytes.
macro_rules! asset {
    ($name:literal) => {
        (
            $name,
            include_bytes!(concat!("../assets/graphiql/", $name)) as &[u8],
        )
    };
}

const ASSETS: [(&str, &[u8]); 5] = [
    asset!("graphiql.min.js"),
    asset!("graphiql.min.css"),
    asset!("react.production.min.js"),
    asset!("react-dom.production.min.js"),
    asset!("graphql-ws.min.js"),
];

const DEFAULT_QUERY: &str = r#"# Welcome to votegraph. Log in with signUp or logIn, put
#   {"Authorization": "Bearer <token>"}
# in the Headers tab, and try a subscription in a second tab.
{
  articles(order: SCORE, page: 1, pageSize: 10) {
    id
    title
    link
    poster { name karma }
    postedAt
    votes
    downvotes
    score
    groups
  }
}
"#;

/// `GET /`: the GraphiQL page. `?query=…` preloads a document.
#[handler]
pub async fn page() -> Html<String> {
    let default_query = serde_json::to_string(DEFAULT_QUERY).unwrap_or_default();
    Html(format!(
        r#"<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>votegraph · GraphiQL</title>
  <link rel="icon" href="data:,">
  <link rel="stylesheet" href="/assets/graphiql/graphiql.min.css?v={v}">
  <style>html, body, #graphiql {{ height: 100%; margin: 0; }}</style>
</head>
<body>
  <div id="graphiql">Loading GraphiQL…</div>
  <script src="/assets/graphiql/react.production.min.js?v={v}"></script>
  <script src="/assets/graphiql/react-dom.production.min.js?v={v}"></script>
  <script src="/assets/graphiql/graphql-ws.min.js?v={v}"></script>
  <script src="/assets/graphiql/graphiql.min.js?v={v}"></script>
  <script>
    const url = new URL('/graphql', window.location.href).href;
    // GraphiQL keeps the headers editor in localStorage; the WebSocket sends
    // them in connection_init, where votegraph reads Authorization.
    const headers = () => {{
      try {{ return JSON.parse(localStorage.getItem('graphiql:headers') || '{{}}') || {{}}; }}
      catch (e) {{ return {{}}; }}
    }};
    const fetcher = GraphiQL.createFetcher({{
      url,
      wsClient: graphqlWs.createClient({{
        url: url.replace(/^http/, 'ws'),
        lazy: true,
        connectionParams: headers,
      }}),
    }});
    const params = new URLSearchParams(window.location.search);
    ReactDOM.createRoot(document.getElementById('graphiql')).render(
      React.createElement(GraphiQL, {{
        fetcher,
        defaultQuery: {default_query},
        query: params.get('query') || undefined,
        shouldPersistHeaders: true,
      }}),
    );
  </script>
</body>
</html>
"#,
        v = ASSET_VERSION,
    ))
}

/// Codings the assets are offered in, preferred first. zstd is not
/// offered: it matches brotli's size only at levels too slow for start-up.
const ASSET_ENCODINGS: [Encoding; 2] = [Encoding::Br, Encoding::Gzip];

/// Each asset's compressed forms, made once per process on first request
/// (on a blocking thread: the script takes 0.7 s at brotli 9).
static COMPRESSED: [[OnceCell<Option<bytes::Bytes>>; 2]; 5] =
    [const { [const { OnceCell::const_new() }; 2] }; 5];

/// `GET /assets/graphiql/:file`, compressed by `Accept-Encoding`.
#[handler]
pub async fn asset(Path(file): Path<String>, headers: &HeaderMap) -> Response {
    let Some(index) = ASSETS.iter().position(|(name, _)| *name == file) else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .content_type("application/json")
            .body(AppError::UnknownPath.into_json_body());
    };
    let (name, bytes) = ASSETS[index];
    let content_type = if name.ends_with(".css") {
        "text/css; charset=utf-8"
    } else {
        "text/javascript; charset=utf-8"
    };
    let response = Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "public, max-age=31536000, immutable")
        .header(header::VARY, "Accept-Encoding");
    let Some(encoding) = Encoding::negotiate(headers, &ASSET_ENCODINGS) else {
        return response.body(bytes);
    };
    let slot = ASSET_ENCODINGS
        .iter()
        .position(|e| *e == encoding)
        .unwrap_or(0);
    let form = COMPRESSED[index][slot]
        .get_or_init(|| async move {
            tokio::task::spawn_blocking(move || encoding.compress(bytes, Level::Best))
                .await
                .ok()
                .flatten()
        })
        .await;
    match form {
        Some(form) => response
            .header(header::CONTENT_ENCODING, encoding.name())
            .body(form.clone()),
        None => response.body(bytes),
    }
}
