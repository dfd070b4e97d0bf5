//! Many WebSocket subscribers on one server while votes stream in:
//! deliveries per second, vote-to-delivery latency, memory per subscriber,
//! and the CPU of both the server and the bench's own clients (which share
//! the machine, so their cost is part of what the latency shows).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::load::{vote_query, Gql};
use crate::seed::{now, token, Rng};

#[derive(Debug, Clone, Serialize)]
pub struct SubStats {
    /// The subscription every client runs.
    pub document: String,
    pub subscribers: usize,
    pub votes: u64,
    pub expected_deliveries: u64,
    pub delivered: u64,
    /// Deliveries over the time from the first vote to the last delivery.
    pub deliveries_per_sec: f64,
    /// votegraph's CPU time (user + system) over that time, per delivery.
    pub server_cpu_us_per_delivery: f64,
    /// votegraph's CPU time over that time, in cores.
    pub server_cores: f64,
    /// This process' CPU time (the simulated clients, the voters and their
    /// parsing) over that time, per delivery and in cores.
    pub bench_cpu_us_per_delivery: f64,
    pub bench_cores: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub rss_idle_kib: u64,
    pub rss_subscribed_kib: u64,
    pub kib_per_subscriber: f64,
}

/// CPU time a process has used (user + system), in seconds.
pub fn cpu_secs(pid: u32) -> f64 {
    // Fields 14 and 15 of /proc/<pid>/stat, after the parenthesised name.
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_owned();
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    // USER_HZ is 100 on every Linux this runs on.
    ticks as f64 / 100.0
}

pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The subscription of the plain run: nothing read from Redis per event.
pub const SCORES: &str = "subscription { scoreChanged { votes at } }";
/// One that reads the article for every event.
pub const WITH_ARTICLE: &str = "subscription { scoreChanged { at article { id title score } } }";

/// Descriptors this process may open (the soft limit), from /proc.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// What every subscriber shares: counters, and the signal to stop.
#[derive(Clone)]
struct Shared {
    connected: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
    /// Microseconds after `origin` of the latest delivery.
    last_delivery: Arc<AtomicU64>,
    origin: Instant,
    stop: tokio::sync::watch::Receiver<bool>,
}

/// One subscription run: `subscribers` clients of `document` on the server
/// at `base` (process `pid`), while `vote_rate` votes a second land on
/// `open` articles for `duration`, each by a distinct user from `first_user`.
pub struct Run<'a> {
    pub base: &'a str,
    pub pid: u32,
    pub document: &'a str,
    pub subscribers: usize,
    pub vote_rate: f64,
    pub duration: Duration,
    pub open: &'a [u64],
    pub first_user: usize,
}

pub async fn run(run: Run<'_>) -> anyhow::Result<SubStats> {
    check_open_files(run.subscribers)?;
    let rss_idle = rss_kib(run.pid);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let shared = Shared {
        connected: Arc::default(),
        delivered: Arc::default(),
        last_delivery: Arc::default(),
        origin: Instant::now(),
        stop: stop_rx,
    };
    let clients = connect(&run, &shared).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_subscribed = rss_kib(run.pid);
    let live = shared.connected.load(Ordering::Relaxed) as usize;
    eprintln!("  {live} subscribers connected; server RSS {rss_idle} KiB idle, {rss_subscribed} KiB subscribed");

    let cpu_before = cpu_secs(run.pid);
    let bench_before = cpu_secs(std::process::id());
    let started = Instant::now();
    let votes = stream_votes(&run).await;
    wait_for_deliveries(&shared.delivered, votes * live as u64).await;
    let cpu = cpu_secs(run.pid) - cpu_before;
    let bench_cpu = cpu_secs(std::process::id()) - bench_before;
    let window = started.elapsed().as_secs_f64();
    let _ = stop_tx.send(true);
    let mut all = Vec::new();
    for c in clients {
        if let Ok(l) = c.await {
            all.extend(l);
        }
    }
    let elapsed = Duration::from_micros(shared.last_delivery.load(Ordering::Relaxed))
        .saturating_sub(started - shared.origin)
        .as_secs_f64();
    all.sort_unstable();
    let pct = |p: f64| {
        if all.is_empty() {
            0.0
        } else {
            all[((all.len() as f64 * p).ceil() as usize).clamp(1, all.len()) - 1] as f64 / 1000.0
        }
    };
    let delivered = shared.delivered.load(Ordering::Relaxed);
    let deliveries = delivered.max(1) as f64;
    Ok(SubStats {
        document: run.document.to_owned(),
        subscribers: live,
        votes,
        expected_deliveries: votes * live as u64,
        delivered,
        deliveries_per_sec: delivered as f64 / elapsed.max(0.001),
        server_cpu_us_per_delivery: cpu * 1e6 / deliveries,
        server_cores: cpu / window,
        bench_cpu_us_per_delivery: bench_cpu * 1e6 / deliveries,
        bench_cores: bench_cpu / window,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        max_ms: all.last().map_or(0.0, |m| *m as f64 / 1000.0),
        rss_idle_kib: rss_idle,
        rss_subscribed_kib: rss_subscribed,
        kib_per_subscriber: rss_subscribed.saturating_sub(rss_idle) as f64 / live.max(1) as f64,
    })
}

/// One descriptor per client here, and one per client in the server
/// (which inherits this limit).
fn check_open_files(subscribers: usize) -> anyhow::Result<()> {
    if let Some(limit) = open_files_limit() {
        if limit < subscribers as u64 + 512 {
            anyhow::bail!(
                "{subscribers} subscribers need more open files than the limit of {limit}: raise it (ulimit -n {})",
                subscribers + 512
            );
        }
    }
    Ok(())
}

/// Starts every subscriber and waits until each has subscribed (or
/// failed to); each task answers its delivery latencies in microseconds.
async fn connect(run: &Run<'_>, shared: &Shared) -> Vec<tokio::task::JoinHandle<Vec<u32>>> {
    let subscribe = serde_json::json!({
        "id": "1",
        "type": "subscribe",
        "payload": { "query": run.document },
    })
    .to_string();
    let ws_url = format!("{}/graphql", run.base.replacen("http", "ws", 1));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(run.subscribers.max(1));
    let mut clients = Vec::with_capacity(run.subscribers);
    for _ in 0..run.subscribers {
        let (subscribe, ws_url, shared, ready) = (
            subscribe.clone(),
            ws_url.clone(),
            shared.clone(),
            ready_tx.clone(),
        );
        clients.push(tokio::spawn(subscriber(ws_url, subscribe, shared, ready)));
        // Connect in waves, so the accept queue is not flooded.
        if clients.len().is_multiple_of(250) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    drop(ready_tx);
    for _ in 0..run.subscribers {
        ready_rx.recv().await;
    }
    clients
}

/// One client: subscribes, then reads events until told to stop.
async fn subscriber(
    ws_url: String,
    subscribe: String,
    shared: Shared,
    ready: tokio::sync::mpsc::Sender<()>,
) -> Vec<u32> {
    let mut latencies = Vec::new();
    let Ok(mut request) = ws_url.into_client_request() else {
        return latencies;
    };
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().expect("header"),
    );
    let Ok((mut socket, _)) = tokio_tungstenite::connect_async(request).await else {
        let _ = ready.send(()).await;
        return latencies;
    };
    let init = socket
        .send(Message::text(r#"{"type":"connection_init"}"#))
        .await;
    let _ack = socket.next().await;
    let sub = socket.send(Message::text(subscribe)).await;
    if init.is_ok() && sub.is_ok() {
        shared.connected.fetch_add(1, Ordering::Relaxed);
    }
    let _ = ready.send(()).await;
    drop(ready);
    // One stop future for the whole loop, not a new one per message.
    let mut stop = shared.stop.clone();
    let stopped = stop.wait_for(|stop| *stop);
    tokio::pin!(stopped);
    loop {
        let next = tokio::select! {
            biased;
            next = socket.next() => next,
            _ = &mut stopped => break,
        };
        match next {
            Some(Ok(Message::Text(text))) => {
                if let Some(at) = event_time(&text) {
                    latencies.push(((now() - at) * 1e6).max(0.0) as u32);
                    shared.delivered.fetch_add(1, Ordering::Relaxed);
                    let at = shared.origin.elapsed().as_micros() as u64;
                    shared.last_delivery.fetch_max(at, Ordering::Relaxed);
                }
            }
            Some(Ok(_)) => {}
            _ => break,
        }
    }
    latencies
}

/// Votes at a steady rate for the run's duration, each by a distinct
/// user; answers how many were accepted.
async fn stream_votes(run: &Run<'_>) -> u64 {
    let gql = Gql::new(run.base, 16);
    let votes_ok = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / run.vote_rate));
    let mut rng = Rng::new(7);
    let mut sent = Vec::new();
    let mut n = 0;
    while started.elapsed() < run.duration {
        tick.tick().await;
        let (gql, votes_ok) = (gql.clone(), votes_ok.clone());
        let id = run.open[(rng.next_u64() % run.open.len() as u64) as usize];
        let user = run.first_user + n;
        n += 1;
        sent.push(tokio::spawn(async move {
            if gql.post(vote_query(id), Some(&token(user))).await {
                votes_ok.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for s in sent {
        let _ = s.await;
    }
    votes_ok.load(Ordering::Relaxed)
}

/// Gives the last events time to arrive: waits for every delivery, or for
/// 3 s without any.
async fn wait_for_deliveries(delivered: &AtomicU64, expected: u64) {
    let mut seen = delivered.load(Ordering::Relaxed);
    let mut quiet_since = Instant::now();
    while seen < expected && quiet_since.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now_seen = delivered.load(Ordering::Relaxed);
        if now_seen > seen {
            (seen, quiet_since) = (now_seen, Instant::now());
        }
    }
}

/// The `at` of a `next` message, in Unix seconds. Found by its field name
/// rather than by parsing the whole message: the clients share the machine
/// with the server, and every microsecond they spend is one it lacks.
fn event_time(text: &str) -> Option<f64> {
    let (_, rest) = text.split_once(r#""at":""#)?;
    let (at, _) = rest.split_once('"')?;
    let parsed = chrono::DateTime::parse_from_rfc3339(at).ok()?;
    Some(parsed.timestamp_micros() as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    #[test]
    fn event_times_are_read_from_either_document() {
        for text in [
            r#"{"id":"1","type":"next","payload":{"data":{"scoreChanged":{"votes":3,"at":"2026-11-22T18:47:58.250000Z"}}}}"#,
            r#"{"id":"1","type":"next","payload":{"data":{"scoreChanged":{"at":"2026-11-22T18:47:58.250000Z","article":{"id":"7","title":"a \"quoted\" title","score":1.5}}}}}"#,
        ] {
            assert_eq!(super::event_time(text), Some(1795373278.25));
        }
        assert_eq!(super::event_time(r#"{"type":"ka"}"#), None);
    }
}
