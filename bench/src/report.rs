//! What a run prints and writes: the table, the ratios between scenarios,
//! the summary lines, and the JSON results.

use serde_json::{json, Value};

use crate::load::{self, Stats};
use crate::scenarios::*;
use crate::subscribers::SubStats;
use crate::{busy, http_limit, peer};

/// Everything a run measured.
pub struct Report<'a> {
    pub articles: u64,
    pub connections: usize,
    pub duration_s: f64,
    pub vote_rate: f64,
    pub startup_ms: f64,
    pub rss_after_load_kib: u64,
    pub results: &'a [Stats],
    pub subscriptions: &'a [SubStats],
    pub peer: &'a Value,
    /// The response cache's hit rate over the anonymous mix.
    pub mix_hit_rate: Option<f64>,
}

pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Report<'_> {
    fn scenario(&self, name: &str) -> Option<&Stats> {
        self.results.iter().find(|s| s.scenario == name)
    }

    /// Ratios between scenarios. The throughput ones divide votegraph's by the other's;
    /// the N+1 ones compare votegraph's batched page with the bench's own
    /// raw N+1 baseline, which has no HTTP or GraphQL to pay for: a lower
    /// bound of what batching buys.
    pub fn ratios(&self) -> Value {
        let rps = |name: &str| self.scenario(name).map(|s| s.rps);
        let p50 = |name: &str| self.scenario(name).map(|s| s.p50_ms);
        let p99 = |name: &str| self.scenario(name).map(|s| s.p99_ms);
        let cpu = |name: &str| {
            self.scenario(name)
                .and_then(|s| s.server_cpu_us_per_request)
        };
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) if y > 0.0 => Some(x / y),
            _ => None,
        };
        json!({
            "front_page_vs_raw_redis": ratio(rps(FRONT_PAGE), rps(RAW)),
            "front_page_vs_http_limit": ratio(rps(FRONT_PAGE), rps(http_limit::NAME)),
            "front_page_uncached_vs_raw_redis": ratio(rps(FRONT_PAGE_UNCACHED), rps(RAW)),
            "logged_in_vs_raw_redis": ratio(rps(LOGGED_IN), rps(RAW_LOGGED_IN)),
            "logged_in_vs_node_peer": ratio(rps(LOGGED_IN), rps(peer::LOGGED_IN)),
            "logged_in_cpu_per_request_node_peer_vs_votegraph": ratio(cpu(peer::LOGGED_IN), cpu(LOGGED_IN)),
            "node_peer_logged_in_vs_raw_redis": ratio(rps(peer::LOGGED_IN), rps(RAW_LOGGED_IN)),
            "front_page_uncached_vs_node_peer": ratio(rps(FRONT_PAGE_UNCACHED), rps(peer::UNCACHED)),
            "batched_vs_raw_n_plus_1": ratio(rps(FRONT_PAGE_UNCACHED), rps(RAW_N_PLUS_1)),
            "raw_batched_vs_raw_n_plus_1": ratio(rps(RAW), rps(RAW_N_PLUS_1)),
            "batched_vs_raw_n_plus_1_with_1ms_hop": ratio(rps(HOP), rps(RAW_HOP_N_PLUS_1)),
            "batched_vs_raw_n_plus_1_with_1ms_hop_1_client": ratio(rps(HOP_1_BATCHED), rps(RAW_HOP_1_N_PLUS_1)),
            "raw_batched_vs_raw_n_plus_1_with_1ms_hop_1_client": ratio(rps(RAW_HOP_1_BATCHED), rps(RAW_HOP_1_N_PLUS_1)),
            "raw_logged_in_batched_vs_raw_n_plus_1": ratio(rps(RAW_LOGGED_IN), rps(RAW_N_PLUS_1_LOGGED_IN)),
            "group_cold_vs_warm_p50": ratio(p50(GROUP_PAGE_COLD), p50(GROUP_PAGE_UNCACHED)),
            "busy_vs_raw_redis": ratio(rps(busy::NAME), rps(RAW_LOGGED_IN)),
            "busy_p99_vs_logged_in_p99": ratio(p99(busy::NAME), p99(LOGGED_IN)),
            "group_page_p99_vs_front_page_p99": ratio(p99(GROUP_PAGE), p99(FRONT_PAGE)),
            "mix_response_cache_hit_rate": self.mix_hit_rate,
        })
    }

    /// The Markdown table of every scenario.
    pub fn print_table(&self) {
        println!(
            "\nvotegraph-bench: {} articles, {} connections, {:.0} s per scenario, {} CPUs\n",
            self.articles,
            self.connections,
            self.duration_s,
            cpus()
        );
        println!("| scenario | req/s | p50 ms | p90 ms | p99 ms | max ms | errors | Redis cmds/req | server CPU µs/req |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for s in self.results {
            println!(
                "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
                s.scenario,
                s.rps,
                s.p50_ms,
                s.p90_ms,
                s.p99_ms,
                s.max_ms,
                s.errors,
                load::shown(s.redis_commands_per_request),
                load::shown(s.server_cpu_us_per_request)
            );
        }
    }

    /// One line per comparison that was measured.
    pub fn print_summary(&self, ratios: &Value) {
        println!(
            "\nstart-up {:.0} ms; resident memory after the load {} MiB",
            self.startup_ms,
            self.rss_after_load_kib / 1024
        );
        let shown = |key: &str| {
            ratios[key]
                .as_f64()
                .map_or("-".into(), |r| format!("{r:.2}"))
        };
        if ratios["front_page_vs_http_limit"].is_f64() {
            println!(
                "cached front page ÷ HTTP limit (poem answering its bytes) {}× req/s",
                shown("front_page_vs_http_limit")
            );
        }
        if ratios["logged_in_vs_node_peer"].is_f64() {
            println!(
                "logged-in front page: votegraph ÷ Node peer {}× req/s (the peer spends {}× votegraph's CPU per request); votegraph ÷ raw-Redis floor {}×",
                shown("logged_in_vs_node_peer"),
                shown("logged_in_cpu_per_request_node_peer_vs_votegraph"),
                shown("logged_in_vs_raw_redis"),
            );
        } else if let Some(reason) = self.peer["reason"].as_str() {
            println!("Node peer not measured: {reason}");
        }
        let busy_votes = self
            .scenario(busy::NAME)
            .and_then(|s| s.vote_stream.as_ref());
        if let Some(votes) = busy_votes {
            println!(
                "busy logged-in front page ({:.1} votes/s landed, {} vote errors): busy ÷ raw-Redis logged-in floor {}× req/s; busy p99 ÷ quiet logged-in p99 {}×",
                votes.landed_per_s,
                votes.errors,
                shown("busy_vs_raw_redis"),
                shown("busy_p99_vs_logged_in_p99"),
            );
        }
        if ratios["group_page_p99_vs_front_page_p99"].is_f64() {
            println!(
                "group page p99 ÷ front page p99 {}×",
                shown("group_page_p99_vs_front_page_p99")
            );
        }
        println!(
            "ratios: {}",
            serde_json::to_string(ratios).unwrap_or_default()
        );
    }

    pub fn print_subscriptions(&self) {
        for s in self.subscriptions {
            println!(
                "\nsubscribers of `{}`: {} connected, {} votes at {:.0}/s → {} of {} events delivered, {:.0} deliveries/s, latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms; server CPU {:.1} µs per delivery ({:.2} cores), bench clients {:.1} µs per delivery ({:.2} cores); {:.1} KiB per subscriber ({} → {} KiB)",
                s.document, s.subscribers, s.votes, self.vote_rate, s.delivered, s.expected_deliveries, s.deliveries_per_sec, s.p50_ms, s.p99_ms, s.max_ms, s.server_cpu_us_per_delivery, s.server_cores, s.bench_cpu_us_per_delivery, s.bench_cores, s.kib_per_subscriber, s.rss_idle_kib, s.rss_subscribed_kib
            );
        }
    }

    /// The JSON results.
    pub fn json(&self, ratios: Value) -> Value {
        json!({
            "articles": self.articles,
            "connections": self.connections,
            "duration_s": self.duration_s,
            "cpus": cpus(),
            "startup_ms": self.startup_ms,
            "rss_after_load_kib": self.rss_after_load_kib,
            "scenarios": self.results,
            "ratios": ratios,
            "node_peer": self.peer,
            "subscribers": self.subscriptions,
        })
    }
}
