//! CORS: which browser origins may call the API. Our own middleware, not
//! poem's, because every response must say `Vary: Origin` (added to the
//! handler's `Vary`, not replacing it), and a preflight allows only `GET`
//! and `POST`.

use poem::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use std::sync::Arc;

use poem::{Endpoint, Request, Response};

use crate::error::AppError;

/// The methods a browser may use (preflights for others are refused).
const METHODS: &str = "GET, POST";
/// How long a browser may reuse a preflight's answer, in seconds.
const MAX_AGE_SECS: u32 = 86_400;

/// The allowed origins: any (`*`), or the listed ones.
#[derive(Clone, Debug)]
pub struct Cors {
    any: bool,
    origins: Vec<String>,
}

impl Cors {
    /// From `--cors-origins`: `*` allows any origin, an empty list none.
    pub fn new(origins: &[String]) -> Self {
        Self {
            any: origins.iter().any(|o| o == "*"),
            origins: origins
                .iter()
                .map(|o| o.trim().trim_end_matches('/').to_owned())
                .filter(|o| !o.is_empty() && o != "*")
                .collect(),
        }
    }

    fn allows(&self, origin: &HeaderValue) -> bool {
        self.any
            || origin
                .to_str()
                .is_ok_and(|o| self.origins.iter().any(|allowed| allowed == o))
    }
}

/// The middleware: answers preflights and refused origins itself, and
/// marks every response `Vary: Origin`.
pub async fn cors<E: Endpoint>(
    endpoint: Arc<E>,
    req: Request,
    cors: Arc<Cors>,
) -> poem::Result<Response> {
    let origin = req.headers().get(header::ORIGIN).cloned();
    let mut response = match origin {
        None => endpoint.get_response(req).await,
        Some(origin) if !cors.allows(&origin) => refused("this origin may not call the API"),
        Some(origin) => {
            let preflight = req.method() == Method::OPTIONS
                && req
                    .headers()
                    .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
            let (mut response, allowed) = if preflight {
                preflight_response(req.headers())
            } else {
                (endpoint.get_response(req).await, true)
            };
            if allowed {
                response
                    .headers_mut()
                    .insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            }
            response
        }
    };
    add_vary(response.headers_mut(), "Origin");
    Ok(response)
}

/// The answer to a preflight from an allowed origin, and whether it
/// allows the request.
fn preflight_response(headers: &HeaderMap) -> (Response, bool) {
    let method = headers
        .get(header::ACCESS_CONTROL_REQUEST_METHOD)
        .and_then(|m| m.to_str().ok())
        .unwrap_or("");
    if !matches!(method, "GET" | "POST") {
        return (refused("only GET and POST requests are served"), false);
    }
    let mut response = Response::builder()
        .status(StatusCode::NO_CONTENT)
        .header(header::ACCESS_CONTROL_ALLOW_METHODS, METHODS)
        .header(header::ACCESS_CONTROL_MAX_AGE, MAX_AGE_SECS);
    // Any request header may be sent (Authorization, Content-Type, …).
    if let Some(requested) = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        response = response.header(header::ACCESS_CONTROL_ALLOW_HEADERS, requested.clone());
    }
    let mut response = response.finish();
    let vary = response.headers_mut();
    add_vary(vary, "Access-Control-Request-Method");
    add_vary(vary, "Access-Control-Request-Headers");
    (response, true)
}

/// A refused CORS request: `403` with a JSON error.
fn refused(reason: &'static str) -> Response {
    Response::builder()
        .status(StatusCode::FORBIDDEN)
        .content_type("application/json")
        .body(AppError::Forbidden(reason).into_json_body())
}

/// Adds `name` to the response's `Vary`, keeping what is there.
pub fn add_vary(headers: &mut HeaderMap, name: &str) {
    let present = headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim().eq_ignore_ascii_case(name) || v.trim() == "*");
    if !present {
        if let Ok(value) = HeaderValue::from_str(name) {
            headers.append(header::VARY, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vary_keeps_what_is_there_and_adds_once() {
        let mut headers = HeaderMap::new();
        headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        add_vary(&mut headers, "Origin");
        add_vary(&mut headers, "origin");
        let all: Vec<_> = headers.get_all(header::VARY).iter().collect();
        assert_eq!(all, ["Accept-Encoding", "Origin"]);
    }

    #[test]
    fn origins_are_matched_exactly() {
        let cors = Cors::new(&["https://app.example/".to_owned()]);
        assert!(cors.allows(&HeaderValue::from_static("https://app.example")));
        assert!(!cors.allows(&HeaderValue::from_static("https://app.example.evil")));
        assert!(Cors::new(&["*".to_owned()]).allows(&HeaderValue::from_static("https://x")));
        assert!(!Cors::new(&[]).allows(&HeaderValue::from_static("https://x")));
    }
}
