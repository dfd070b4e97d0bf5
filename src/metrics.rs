//! The metrics registry (`prometheus-client`) and `GET /metrics`.
//!
//! Recorded metrics are counters the measured part adds to as it works
//! (atomics, no lock on the request path); read ones ([`Readings`]) are
//! read from each part's stats when a scrape comes, without a Redis call.
//! Label values are fixed words, numbers and GraphQL names, none needing
//! escaping.
//!
//! On the API's port only direct loopback clients may read it (see
//! [`serves`]); `--metrics-bind` opens a listener of its own.

use std::net::IpAddr;
use std::sync::Arc;

use poem::http::{header, StatusCode};
use poem::web::Data;
use poem::{handler, Request, Response};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Metric;
use prometheus_client::registry::Registry;

use crate::error::AppError;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The metrics being put together at startup.
#[derive(Default)]
pub struct MetricsBuilder {
    registry: Registry,
}

impl MetricsBuilder {
    /// A recorded metric; `name` without the `_total` a counter's samples
    /// get, `help` without its final period (the registry adds one).
    pub fn register(&mut self, name: &str, help: &str, metric: impl Metric) {
        self.registry
            .register(name, help.trim_end_matches('.'), metric);
    }

    /// Metrics read at each scrape by `read`, which reports them on
    /// [`Readings`].
    pub fn read(&mut self, read: impl Fn(&mut Readings<'_>) + Send + Sync + 'static) {
        self.registry
            .register_collector(Box::new(Reader(Box::new(read))));
    }

    pub fn finish(self) -> Metrics {
        Metrics(Arc::new(self.registry))
    }
}

/// Every metric of the process; cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Registry>);

impl Metrics {
    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(32 * 1024);
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.0) {
            tracing::error!(error = %e, "encoding the metrics");
        }
        out
    }
}

/// A scrape-time reader, as the registry takes it.
struct Reader(Box<dyn Fn(&mut Readings<'_>) + Send + Sync>);

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reader")
    }
}

impl prometheus_client::collector::Collector for Reader {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut readings = Readings {
            encoder,
            result: Ok(()),
        };
        (self.0)(&mut readings);
        readings.result
    }
}

/// Values read at a scrape, family by family.
pub struct Readings<'a> {
    encoder: DescriptorEncoder<'a>,
    result: Result<(), std::fmt::Error>,
}

/// One sample of a family: its labels and value.
pub type Sample<'a, T> = (&'a [(&'a str, &'a str)], T);

impl Readings<'_> {
    /// A counter family (`name` without `_total`).
    pub fn counters(&mut self, name: &str, help: &str, samples: &[Sample<'_, u64>]) {
        self.family(name, help, MetricType::Counter, samples, |v| {
            ConstCounter::new(v)
        });
    }

    /// A counter without labels.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.counters(name, help, &[(&[], value)]);
    }

    /// A gauge family.
    pub fn gauges(&mut self, name: &str, help: &str, samples: &[Sample<'_, f64>]) {
        self.family(name, help, MetricType::Gauge, samples, ConstGauge::new);
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.gauges(name, help, &[(&[], value)]);
    }

    fn family<T: Copy, M: EncodeMetric>(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        samples: &[Sample<'_, T>],
        metric: impl Fn(T) -> M,
    ) {
        if self.result.is_err() {
            return;
        }
        self.result = (|| {
            let mut family = self.encoder.encode_descriptor(name, help, None, kind)?;
            match samples {
                [(&[], value)] => metric(*value).encode(family),
                _ => samples.iter().try_for_each(|(labels, value)| {
                    metric(*value).encode(family.encode_family(labels)?)
                }),
            }
        })();
    }
}

/// Histogram buckets in seconds from `bounds` in microseconds.
pub fn buckets(bounds_us: &[u64]) -> impl Iterator<Item = f64> + '_ {
    bounds_us.iter().map(|&us| us as f64 / 1e6)
}

/// Resident memory from `/proc/self/statm` (Linux; None elsewhere): no
/// crate reads one number more simply.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Whether `/metrics` on the API's port answers this request: only a
/// client on this machine (a loopback peer) that did not come through a
/// proxy. A proxy on the same host connects from loopback too, but it adds
/// `X-Forwarded-For` or `Forwarded` (the nginx example in deploy/nginx/ does), so
/// the internet does not reach the metrics through it.
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
    /// On the API port: whether to serve direct loopback clients at all.
    /// Behind trusted proxies a local proxy may forward the internet
    /// without saying so, so there the API port serves `/metrics` only
    /// when told to (`--metrics-on-api-port`).
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
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    #[test]
    fn recorded_and_read_metrics_render_together() {
        let mut builder = MetricsBuilder::default();
        let hits = Counter::<u64>::default();
        builder.register("demo_hits", "Hits.", hits.clone());
        builder.read(|r| {
            r.gauge("demo_size", "A size.", 3.0);
            r.counters(
                "demo_results",
                "Results \"quoted\".",
                &[(&[("result", "a")], 2), (&[("result", "c")], 5)],
            );
        });
        let finished = builder.finish();
        hits.inc();
        let text = finished.render();
        assert!(text.contains("# HELP demo_hits Hits.\n"), "{text}");
        assert!(text.contains("demo_hits_total 1\n"), "{text}");
        assert!(text.contains("demo_size 3.0\n"), "{text}");
        assert!(
            text.contains("demo_results_total{result=\"a\"} 2\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

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
