//! Wires configuration, Redis, the schema and the HTTP server together.

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;
use std::sync::Arc;

use poem::{get, EndpointExt, Route};
use tokio::net::TcpListener;

use crate::auth::PasswordHasher;
use crate::cache::ResponseCache;
use crate::config::Settings;
use crate::cors::Cors;
use crate::graphiql;
use crate::graphql::limits::Guard;
use crate::graphql::{build_api, AppState};
use crate::local_redis::LocalRedis;
use crate::persisted::PersistedQueries;
use crate::pubsub::PubSub;
use crate::routes;
use crate::server::{self, ServerLimits};
use crate::store::{connection_info, Store};
use crate::ws::{Shutdown, WebSockets};

/// A bound, ready-to-run server.
pub struct Application {
    listener: TcpListener,
    port: u16,
    route: poem::endpoint::BoxEndpoint<'static>,
    limits: ServerLimits,
    local_redis: Option<LocalRedis>,
    /// Tells open WebSockets to close when the server stops.
    shutdown: Shutdown,
    /// How long a WebSocket's goodbye may take, as any write.
    send_timeout: Duration,
    /// For the vote-index backfill started with the server.
    store: Store,
    reconcile_votes: bool,
}

impl Application {
    /// Connects the pieces and binds the listener, so the port is known
    /// before the server runs (tests bind port 0).
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let (redis_url, local_redis) = match &settings.redis_url {
            Some(url) => (url.clone(), None),
            None => {
                let local = LocalRedis::start(&settings.redis_server, &settings.data_dir).await?;
                (local.url().to_owned(), Some(local))
            }
        };
        let store = Store::new(
            &redis_url,
            settings.pool_size,
            settings.pool_timeout(),
            Duration::from_millis(settings.redis_timeout_ms.max(1)),
        )
        .context("invalid Redis URL")?
        .with_group_scan_budget(settings.group_scan_budget);
        let persisted = Arc::new(PersistedQueries::new(
            store.clone(),
            settings.persisted_limits(),
        ));
        let hasher = PasswordHasher::new(settings.argon2_memory_kib, settings.argon2_iterations)?;
        let pubsub = PubSub::start(
            redis::Client::open(connection_info(&redis_url)?).context("invalid Redis URL")?,
        );
        let responses = (!settings.no_response_cache)
            .then(|| ResponseCache::new(&pubsub, settings.response_cache_bytes));
        let guard = Guard::new(settings.document_limits(), &crate::graphql::sdl())?;
        let state = AppState::new(
            store.clone(),
            hasher,
            pubsub,
            responses,
            settings.login_limit(),
            settings.rate_limits(),
        );
        let api = build_api(
            state,
            guard,
            Duration::from_millis(settings.request_timeout_ms.max(1)),
        );

        let shutdown = Shutdown::default();

        let cors = Cors::new(&settings.cors_origins);
        let route = Route::new()
            .at("/", get(graphiql::page))
            .at("/assets/graphiql/:file", get(graphiql::asset))
            .at(
                "/graphql",
                get(routes::graphql_get)
                    .post(routes::graphql)
                    .around(routes::graphql_other_methods),
            )
            .at("/health", get(routes::health))
            .data(persisted)
            .data(settings.trusted_proxies.clone())
            .data(routes::BodyLimits {
                max_bytes: settings.max_body_bytes,
                timeout: Duration::from_millis(settings.body_timeout_ms.max(1)),
            })
            .data(WebSockets::new(
                settings.ws_limits(),
                shutdown.clone(),
                api.state().pubsub().clone(),
            ))
            .data(api)
            .with(cors)
            .around(routes::access_log)
            .boxed();

        let listener = TcpListener::bind(settings.bind.as_str())
            .await
            .with_context(|| format!("binding {}", settings.bind))?;
        let port = listener
            .local_addr()
            .context("listener has no address")?
            .port();
        Ok(Self {
            listener,
            port,
            route,
            limits: ServerLimits {
                max_connections: settings.max_connections,
                max_per_client: settings.max_connections_per_client,
                header_timeout: Duration::from_millis(settings.header_timeout_ms.max(1)),
                trusted: settings.trusted_proxies.clone(),
            },
            local_redis,
            shutdown,
            send_timeout: settings.ws_limits().send_timeout,
            store,
            reconcile_votes: settings.reconcile_votes,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Serves until Ctrl-C or SIGTERM.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        self.run_until(shutdown_signal()).await
    }

    /// Serves until `signal` completes, then lets requests in flight finish
    /// (up to 10 s), closes every WebSocket with 1001 and stops the local
    /// Redis, if any.
    pub async fn run_until(self, signal: impl Future<Output = ()> + Send) -> anyhow::Result<()> {
        tracing::info!(port = self.port, "votegraph listening");
        // Runs beside the server and stops with it.
        let backfill = self.store.start_vote_index_backfill(self.reconcile_votes);
        let shutdown = self.shutdown.clone();
        // WebSockets are told as soon as the signal comes, so their goodbyes
        // go out while HTTP requests finish.
        let signal = async move {
            signal.await;
            shutdown.trigger();
        };
        let served = server::serve(
            self.listener,
            self.route,
            self.limits,
            signal,
            Duration::from_secs(10),
        )
        .await;
        drop(backfill);
        // The serve loop waited for every connection, upgraded ones
        // included; this only bounds a socket still saying goodbye.
        let goodbyes = self.send_timeout + Duration::from_secs(2);
        if tokio::time::timeout(goodbyes, self.shutdown.connections_closed())
            .await
            .is_err()
        {
            tracing::warn!("some WebSockets were still closing at shutdown");
        }
        if let Some(redis) = self.local_redis {
            redis.stop().await;
        }
        served.context("server failed")
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
