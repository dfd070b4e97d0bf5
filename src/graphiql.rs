//! GraphiQL, compiled in so it works offline (`assets/graphiql/README.md`).
//! Subscriptions go over `/graphql`'s WebSocket, which reads `Authorization`
//! from GraphiQL's headers editor.

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

/// The page (votegraph's own), `{v}` standing for [`ASSET_VERSION`].
const PAGE: &str = include_str!("../assets/graphiql/index.html");

/// `GET /`: the GraphiQL page. `?query=…` preloads a document.
#[handler]
pub async fn page() -> Html<String> {
    Html(PAGE.replace("{v}", ASSET_VERSION))
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
