//! Wires configuration, Redis, the schema and the HTTP server together.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use poem::endpoint::BoxEndpoint;
use poem::{get, EndpointExt, Route};
use tokio::net::TcpListener;

use crate::auth::PasswordHasher;
use crate::budget::WorkBudget;
use crate::cache::ResponseCache;
use crate::config::Settings;
use crate::cors::Cors;
use crate::graphql::limits::Guard;
use crate::graphql::{build_api, AppState};
use crate::http::{self, BodyLimits, Served};
use crate::local_redis::LocalRedis;
use crate::metrics;
use crate::persisted::PersistedQueries;
use crate::pubsub::PubSub;
use crate::scrape;
use crate::server::{self, ServerLimits};
use crate::sessions::SessionWatch;
use crate::state::ReplicaLag;
use crate::store::{Locator, Store};
use crate::telemetry::RequestMetrics;
use crate::trusted::TrustedDocuments;
use crate::ws::{Shutdown, WebSockets};
use tokio_util::task::AbortOnDropHandle;
use votegraph_domain::metrics::MetricsBuilder;

/// A bound, ready-to-run server.
pub struct Application {
    settings: Settings,
    listener: TcpListener,
    route: BoxEndpoint<'static>,
    local_redis: Option<LocalRedis>,
    state: Arc<AppState>,
    /// Tells open WebSockets to close when the server stops.
    shutdown: Shutdown,
    /// `/health` says `draining` during the shutdown grace period.
    draining: http::Draining,
    /// The `--metrics-bind` listener and its one route.
    metrics_listener: Option<(TcpListener, BoxEndpoint<'static>)>,
    /// Feeds the response cache its events (see [`keep_current`]).
    _cache_upkeep: Option<AbortOnDropHandle<()>>,
}

impl Application {
    /// Connects the pieces and binds the listener (its port is known then).
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let guard = Guard::new(settings.documents, &crate::graphql::sdl())?;
        let (path, only) = (
            settings.trusted_documents.as_deref(),
            settings.trusted_documents_only,
        );
        let trusted = TrustedDocuments::load(path, only, &guard).await?;
        let redis_timeout = Duration::from_millis(settings.redis_timeout_ms.max(1));
        let (locator, local_redis) = locate_redis(&settings, redis_timeout).await?;
        let store = primary_store(&settings, locator.clone(), redis_timeout)?
            .open_keyspace(settings.cluster_shards)
            .await?;
        store.find_nodes().await;
        index_names(&store).await;
        let pubsub = PubSub::start(locator);
        let responses = (!settings.no_response_cache)
            .then(|| Arc::new(ResponseCache::new(settings.response_cache_bytes)));
        let cache_upkeep = responses.as_ref().map(|cache| keep_current(cache, &pubsub));
        let state = shared_state(&settings, &store, pubsub, responses, trusted, redis_timeout)?;
        let deadline = Duration::from_millis(settings.request_timeout_ms.max(1));
        let budget = WorkBudget::new(settings.budget);
        let api = build_api(state.clone(), guard, deadline, budget);
        check_redis(store.clone(), local_redis.is_some());
        let shutdown = Shutdown::default();
        let sessions = SessionWatch::start(store, &state.pubsub);
        let (limits, pubsub) = (settings.ws_limits(), state.pubsub.clone());
        let sockets = WebSockets::new(limits, shutdown.clone(), pubsub, sessions);
        let requests = Arc::new(RequestMetrics::default());
        let mut registry = MetricsBuilder::default();
        scrape::register(&mut registry, &requests, &api, &sockets);
        let metrics = metrics::Endpoint {
            metrics: registry.finish(),
            open: false,
            on_api_port: settings.trusted_proxies.is_empty() || settings.metrics_on_api_port,
        };
        let metrics_listener = metrics_listener(&settings, &metrics).await?;
        let draining = http::Draining::default();
        let route = http::routes(Served {
            api,
            sockets,
            metrics,
            trusted: settings.trusted_proxies.clone(),
            body_limits: BodyLimits {
                max_bytes: settings.max_body_bytes,
                timeout: Duration::from_millis(settings.body_timeout_ms.max(1)),
            },
            draining: draining.clone(),
            cors: Cors::new(&settings.cors_origins),
            requests,
        });
        let listener = TcpListener::bind(&settings.bind)
            .await
            .with_context(|| format!("binding {}", settings.bind))?;
        Ok(Self {
            settings,
            listener,
            route,
            local_redis,
            state,
            shutdown,
            draining,
            metrics_listener,
            _cache_upkeep: cache_upkeep,
        })
    }

    pub fn port(&self) -> u16 {
        self.listener.local_addr().map_or(0, |addr| addr.port())
    }

    /// The port of the `--metrics-bind` listener, if there is one.
    pub fn metrics_port(&self) -> Option<u16> {
        let (listener, _) = self.metrics_listener.as_ref()?;
        Some(listener.local_addr().ok()?.port())
    }

    /// Serves until Ctrl-C or SIGTERM.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        self.run_until(shutdown_signal()).await
    }

    /// Serves until `signal`, then lets requests in flight finish (up to
    /// 10 s), closes every WebSocket with 1001 and stops a local Redis.
    pub async fn run_until(self, signal: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
        tracing::info!(port = self.port(), "votegraph listening");
        let settings = &self.settings;
        let store = &self.state.store;
        // Runs beside the server and stops with it.
        let top_upkeep = Duration::from_millis(settings.top_upkeep_ms);
        // No other client shares a cluster's keyspace: nothing to follow.
        let single = !store.layout().is_cluster();
        let background = (
            store.start_top_index(top_upkeep),
            // Follows the writes of other clients (the book's code) as they come.
            single.then(|| store.start_deriver()),
            store.start_outbox(),
            sample_replica_lag(&self.state),
        );
        let (stopping, stopped) = tokio::sync::watch::channel(false);
        let grace = Duration::from_millis(settings.shutdown_grace_ms);
        let shutdown = self.shutdown.clone();
        let signal = drain_then_stop(signal, self.draining, grace, shutdown, stopping);
        let limits = ServerLimits {
            max_connections: settings.max_connections,
            max_per_client: settings.max_connections_per_client,
            header_timeout: Duration::from_millis(settings.header_timeout_ms.max(1)),
            trusted: settings.trusted_proxies.clone(),
        };
        let metrics = self
            .metrics_listener
            .map(|(listener, route)| serve_metrics(listener, route, &limits, stopped));
        let grace = Duration::from_secs(10);
        let served = server::serve(self.listener, self.route, limits, signal, grace).await;
        drop(background);
        // The serve loop waited for every connection, upgraded ones
        // included; this only bounds a socket still saying goodbye.
        let goodbyes = settings.ws_limits().send_timeout + Duration::from_secs(2);
        if tokio::time::timeout(goodbyes, self.shutdown.connections_closed())
            .await
            .is_err()
        {
            tracing::warn!("some WebSockets were still closing at shutdown");
        }
        if let Some(metrics) = metrics {
            // It stopped with the signal; a scrape in flight has a second.
            let _ = tokio::time::timeout(Duration::from_secs(2), metrics).await;
        }
        if let Some(redis) = self.local_redis {
            // Its connection closing is no loss to report.
            self.state.pubsub.stop();
            redis.stop().await;
        }
        served.context("server failed")
    }
}

/// Where Redis is: Sentinel, a URL, or a `redis-server` started here.
async fn locate_redis(
    settings: &Settings,
    redis_timeout: Duration,
) -> anyhow::Result<(Locator, Option<LocalRedis>)> {
    if let Some(locator) = settings.configured_redis(redis_timeout)? {
        return Ok((locator, None));
    }
    let local = LocalRedis::start(&settings.redis_server, &settings.data_dir).await?;
    let locator = Locator::url(local.url()).context("invalid Redis URL")?;
    Ok((locator, Some(local)))
}

/// The pool of the primary, which every write goes to.
fn primary_store(
    settings: &Settings,
    locator: Locator,
    redis_timeout: Duration,
) -> anyhow::Result<Store> {
    let wait = (settings.wait_replicas > 0).then(|| {
        (
            settings.wait_replicas,
            Duration::from_millis(settings.wait_timeout_ms),
        )
    });
    let store = Store::new(
        locator,
        settings.pool_size,
        settings.pool_timeout(),
        settings.reply_timeout(redis_timeout),
        wait,
    )
    .context("invalid Redis URL")?;
    Ok(store
        .with_group_scan_budget(settings.group_scan_budget)
        .with_moderation(settings.moderation())
        .with_outbox_limit(settings.outbox_max_entries))
}

/// The pool of `--redis-replica-url`, which serves reads that may lag.
fn replica_store(settings: &Settings, redis_timeout: Duration) -> anyhow::Result<Option<Store>> {
    let Some(url) = &settings.redis_replica_url else {
        return Ok(None);
    };
    let store = Store::new(
        Locator::url(url).context("invalid REDIS_REPLICA_URL")?,
        settings.pool_size,
        settings.pool_timeout(),
        redis_timeout,
        None,
    )
    .context("invalid REDIS_REPLICA_URL")?;
    Ok(Some(store))
}

/// What every request shares: the stores, pub/sub, caches and limits.
fn shared_state(
    settings: &Settings,
    store: &Store,
    pubsub: PubSub,
    responses: Option<Arc<ResponseCache>>,
    trusted: TrustedDocuments,
    redis_timeout: Duration,
) -> anyhow::Result<Arc<AppState>> {
    let persisted = PersistedQueries::new(store.clone(), settings.persisted_limits(), trusted);
    Ok(Arc::new(AppState {
        store: store.clone(),
        replica: replica_store(settings, redis_timeout)?,
        replica_lag: ReplicaLag::default(),
        hasher: PasswordHasher::new(settings.argon2_memory_kib, settings.argon2_iterations)?,
        pubsub,
        responses,
        persisted,
        login: settings.login_limit(),
        rates: settings.rate_limits(),
    }))
}

/// The `--metrics-bind` listener and its one route, open to any client.
async fn metrics_listener(
    settings: &Settings,
    metrics: &metrics::Endpoint,
) -> anyhow::Result<Option<(TcpListener, BoxEndpoint<'static>)>> {
    let Some(bind) = &settings.metrics_bind else {
        return Ok(None);
    };
    let listener = TcpListener::bind(bind.as_str())
        .await
        .with_context(|| format!("binding the metrics listener {bind}"))?;
    let route = Route::new()
        .at("/metrics", get(metrics::metrics))
        .data(metrics::Endpoint {
            open: true,
            ..metrics.clone()
        })
        .boxed();
    Ok(Some((listener, route)))
}

/// The replica's lag, measured every second for /health and /metrics.
fn sample_replica_lag(state: &Arc<AppState>) -> Option<AbortOnDropHandle<()>> {
    let replica = state.replica.clone()?;
    let state = state.clone();
    Some(AbortOnDropHandle::new(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        loop {
            ticks.tick().await;
            state.replica_lag.sample(&state.store, &replica).await;
        }
    })))
}

/// Completes after `signal` and the grace period; WebSockets are told at
/// once, so their goodbyes go out while HTTP requests finish.
async fn drain_then_stop(
    signal: impl Future<Output = ()> + Send,
    draining: http::Draining,
    grace: Duration,
    shutdown: Shutdown,
    stopping: tokio::sync::watch::Sender<bool>,
) {
    signal.await;
    if !grace.is_zero() {
        // Still serving; the load balancer's health check sees
        // `draining` and stops sending new requests here.
        draining.start();
        tracing::info!(
            grace_ms = grace.as_millis() as u64,
            "draining before stopping"
        );
        tokio::time::sleep(grace).await;
    }
    shutdown.trigger();
    stopping.send_replace(true);
}

/// Serves the `--metrics-bind` listener until `stopped` turns true.
fn serve_metrics(
    listener: TcpListener,
    route: BoxEndpoint<'static>,
    api_limits: &ServerLimits,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Result<(), std::io::Error>> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "metrics listening");
    }
    let limits = ServerLimits {
        max_connections: METRICS_CONNECTIONS,
        max_per_client: METRICS_CONNECTIONS,
        header_timeout: api_limits.header_timeout,
        trusted: Default::default(),
    };
    let stop = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    tokio::spawn(server::serve(
        listener,
        route,
        limits,
        stop,
        Duration::from_secs(1),
    ))
}

/// Connections the metrics listener holds at once: a scraper or two.
const METRICS_CONNECTIONS: usize = 16;

/// Logs, in the background, whether Redis answers and why not: a wrong
/// `REDIS_URL` shows at startup, not only as "storage unavailable" later.
fn check_redis(store: Store, local: bool) {
    let source = if local {
        "the local redis-server"
    } else {
        "REDIS_URL"
    };
    tokio::spawn(async move {
        match store.check().await {
            Ok(()) => tracing::info!(redis = %store.address(), "redis answers"),
            Err(cause) => tracing::error!(
                redis = %store.address(),
                error = %cause,
                "redis does not answer; check {source}. Requests fail with \"storage unavailable\" until it does"
            ),
        }
    });
}

/// Feeds `cache` the score events of `pubsub` for as long as the handle
/// lives: each vote drops the responses it can change, a moderation (an
/// article taken out or put back, a ban, a role) drops everything, and a
/// loss of events (missed ones, or a pub/sub connection that was down: a Redis
/// restart, a failover) drops everything, since whatever they changed is
/// unknown.
fn keep_current(cache: &Arc<ResponseCache>, pubsub: &PubSub) -> AbortOnDropHandle<()> {
    use tokio::sync::broadcast::error::RecvError;
    let mut events = pubsub.subscribe();
    let mut moderated = pubsub.subscribe_moderated();
    let uncounted = [pubsub.uncounted(), pubsub.uncounted()];
    let mut resubscriptions = pubsub.resubscriptions();
    let cache = Arc::downgrade(cache);
    AbortOnDropHandle::new(tokio::spawn(async move {
        let _uncounted = uncounted;
        loop {
            let vote = tokio::select! {
                event = events.recv() => match event {
                    Ok(event) => Some(event),
                    Err(RecvError::Lagged(_)) => None,
                    Err(RecvError::Closed) => return,
                },
                event = moderated.recv() => match event {
                    Err(RecvError::Closed) => return,
                    _ => None,
                },
                changed = resubscriptions.changed() => match changed {
                    Err(_) => return,
                    Ok(()) => None,
                },
            };
            let Some(cache) = cache.upgrade() else { return };
            match vote {
                Some(event) => cache.vote(event),
                None => cache.invalidate(),
            }
        }
    }))
}

/// Indexes the existing accounts by folded name before the server serves
/// (a SCAN the first time); when Redis cannot be reached, the first
/// sign-up does.
async fn index_names(store: &Store) {
    match tokio::time::timeout(Duration::from_secs(30), store.build_name_index()).await {
        Ok(Ok(Some(n))) => tracing::info!(accounts = n, "indexed the accounts' names"),
        Ok(Ok(None)) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "indexing the accounts' names failed; the first sign-up will")
        }
        Err(_) => {
            tracing::warn!("indexing the accounts' names is slow; the first sign-up will finish it")
        }
    }
    match tokio::time::timeout(Duration::from_secs(30), store.index_sessions()).await {
        Ok(Ok(Some(n))) => tracing::info!(sessions = n, "filed the sessions by user"),
        Ok(Ok(None)) => {}
        _ => tracing::warn!("filing the sessions by user failed; the next start tries again"),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
