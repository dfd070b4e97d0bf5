//! The metrics registry (`prometheus-client`) every layer registers on.
//! Recorded metrics are atomics the measured part adds to; read ones
//! ([`Readings`]) come from each part's stats at a scrape, without a Redis
//! call.

use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Metric;
use prometheus_client::registry::Registry;

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
}
