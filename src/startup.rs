//! Wires configuration, Redis, the schema and the HTTP server together.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use poem::listener::{Acceptor, Listener, TcpAcceptor, TcpListener};
use poem::middleware::{Compression, Cors, Tracing};
use poem::{get, EndpointExt, Route, Server};

use crate::auth::PasswordHasher;
use crate::cache::ResponseCache;
use crate::config::Settings;
use crate::graphiql;
use crate::graphql::{build_schema, Batching};
use crate::local_redis::LocalRedis;
use crate::pubsub::PubSub;
use crate::routes;
use crate::store::{connection_info, Store};
use crate::ws::{Shutdown, WebSockets};

/// A bound, ready-to-run server.
pub struct Application {
    acceptor: TcpAcceptor,
    port: u16,
    route: poem::endpoint::BoxEndpoint<'static>,
    local_redis: Option<LocalRedis>,
    /// Tells open WebSockets to close when the server stops.
    shutdown: Shutdown,
    /// How long a WebSocket's goodbye may take, as any write.
    send_timeout: Duration,
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
        let store = Store::new(&redis_url, settings.pool_size, settings.pool_timeout())
            .context("invalid Redis URL")?
            .with_group_scan_budget(settings.group_scan_budget);
        let hasher = PasswordHasher::new(settings.argon2_memory_kib, settings.argon2_iterations)?;
        let pubsub = PubSub::start(
            redis::Client::open(connection_info(&redis_url)?).context("invalid Redis URL")?,
        );
        let batching = Batching(!settings.no_batching);
        let responses = (!settings.no_response_cache).then(|| ResponseCache::new(&pubsub));
        let schema = build_schema(
            store.clone(),
            hasher,
            pubsub.clone(),
            batching,
            responses.clone(),
            settings.login_limit(),
        );
        let caches = Arc::new(routes::Caches {
            responses,
            documents: Default::default(),
        });

        let shutdown = Shutdown::default();

        let cors = if settings.cors_origins.iter().any(|o| o == "*") {
            Cors::new()
        } else {
            Cors::new().allow_origins(settings.cors_origins.iter().filter(|o| !o.is_empty()))
        };
        let route = Route::new()
            .at("/", get(graphiql::page))
            .at(
                "/assets/graphiql/:file",
                get(graphiql::asset).with(Compression::new()),
            )
            .at("/graphql", get(routes::graphql_get).post(routes::graphql))
            .at("/health", get(routes::health))
            .data(schema)
            .data(store)
            .data(pubsub)
            .data(caches)
            .data(WebSockets::new(settings.ws_limits(), shutdown.clone()))
            .with(cors)
            .with(Tracing)
            .boxed();

        let acceptor = TcpListener::bind(settings.bind.clone())
            .into_acceptor()
            .await
            .with_context(|| format!("binding {}", settings.bind))?;
        let port = acceptor
            .local_addr()
            .first()
            .and_then(|a| a.as_socket_addr().map(|s| s.port()))
            .context("listener has no address")?;
        Ok(Self {
            acceptor,
            port,
            route,
            local_redis,
            shutdown,
            send_timeout: settings.ws_limits().send_timeout,
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
        let shutdown = self.shutdown.clone();
        // WebSockets are told before poem's graceful shutdown starts, so
        // their goodbyes go out while HTTP requests finish.
        let signal = async move {
            signal.await;
            shutdown.trigger();
        };
        let served = Server::new_with_acceptor(self.acceptor)
            .run_with_graceful_shutdown(self.route, signal, Some(Duration::from_secs(10)))
            .await;
        // Upgraded sockets are not poem's any more: wait for their close
        // frames (a stalled client gets at most a write's timeout).
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
