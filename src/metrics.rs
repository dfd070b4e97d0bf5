//! `GET /metrics`: the registry's text, on the API's port only to direct
//! loopback clients (see [`serves`]).

use std::net::IpAddr;

use poem::http::{header, StatusCode};
use poem::web::Data;
use poem::{handler, Request, Response};
use votegraph_domain::metrics::Metrics;

use crate::error::AppError;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether `/metrics` on the API's port answers this request: only a
/// loopback peer without forwarding headers, which a local proxy adds (the
/// example in deploy/nginx/ does).
pub fn serves(peer: Option<IpAddr>, headers: &poem::http::HeaderMap) -> bool {
    let direct = !["x-forwarded-for", "forwarded", "x-real-ip"]
        .iter()
        .any(|h| headers.contains_key(*h));
    direct && peer.is_some_and(|ip| ip.to_canonical().is_loopback())
}

/// What `GET /metrics` serves, and to whom.
#[derive(Clone)]
pub struct Endpoint {
    pub metrics: Metrics,
    /// Serve anyone (a listener of its own, `--metrics-bind`), rather than
    /// only direct loopback clients.
    pub open: bool,
    /// On the API port: whether to serve direct loopback clients at all
    /// (see `--metrics-on-api-port`).
    pub on_api_port: bool,
}

/// `GET /metrics`.
#[handler]
pub async fn metrics(req: &Request, endpoint: Data<&Endpoint>) -> Response {
    let peer = req.remote_addr().as_socket_addr().map(|a| a.ip());
    let allowed = endpoint.open || (endpoint.on_api_port && serves(peer, req.headers()));
    if !allowed {
        // As if there were no such route: nothing to learn from outside.
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .content_type("application/json")
            .body(AppError::UnknownPath.into_json_body());
    }
    Response::builder()
        .header(header::CONTENT_TYPE, CONTENT_TYPE)
        .header(header::CACHE_CONTROL, "no-store")
        .body(endpoint.metrics.render())
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_direct_loopback_clients_read_metrics_on_the_api_port() {
        let none = poem::http::HeaderMap::new();
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(serves(Some(loopback), &none));
        assert!(serves(Some("::1".parse().unwrap()), &none));
        assert!(serves(Some("::ffff:127.0.0.1".parse().unwrap()), &none));
        assert!(!serves(Some("10.0.0.5".parse().unwrap()), &none));
        assert!(!serves(None, &none));
        for header in ["x-forwarded-for", "forwarded", "x-real-ip"] {
            let mut proxied = poem::http::HeaderMap::new();
            proxied.insert(header, "203.0.113.9".parse().unwrap());
            assert!(!serves(Some(loopback), &proxied), "{header}");
        }
    }
}
