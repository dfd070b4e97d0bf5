//! What every request of the process shares, registered once: the store
//! (and the read replica), the password hasher, the pub/sub hub, the
//! response cache, the persisted queries and the write limits. The HTTP
//! routes, the WebSocket loop, the request pipeline and the resolvers'
//! request context all reach it from the API.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use crate::auth::PasswordHasher;
use crate::cache::ResponseCache;
use crate::persisted::PersistedQueries;
use crate::pubsub::PubSub;
use crate::rate::RateLimits;
use crate::store::{LoginLimit, Store};

/// What every request of this process shares, registered once: the HTTP
/// routes, the WebSocket loop and the resolvers (through their
/// request context) all reach it from the API.
pub struct AppState {
    pub(crate) store: Store,
    /// `--redis-replica-url`: where anonymous reads of the site's rankings
    /// and articles may go (see `RequestContext::on_replica`).
    pub(crate) replica: Option<Store>,
    pub(crate) replica_lag: ReplicaLag,
    pub(crate) hasher: PasswordHasher,
    pub(crate) pubsub: PubSub,
    pub(crate) responses: Option<Arc<ResponseCache>>,
    pub(crate) persisted: PersistedQueries,
    pub(crate) login: LoginLimit,
    pub(crate) rates: RateLimits,
}

impl AppState {
    pub fn new(
        store: Store,
        hasher: PasswordHasher,
        pubsub: PubSub,
        responses: Option<Arc<ResponseCache>>,
        persisted: PersistedQueries,
        login: LoginLimit,
        rates: RateLimits,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            replica: None,
            replica_lag: ReplicaLag::default(),
            hasher,
            pubsub,
            responses,
            persisted,
            login,
            rates,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Adds a read replica (see `RequestContext::on_replica`).
    pub fn with_replica(self: Arc<Self>, replica: Option<Store>) -> Arc<Self> {
        match Arc::try_unwrap(self) {
            Ok(mut state) => {
                state.replica = replica;
                Arc::new(state)
            }
            Err(shared) => shared,
        }
    }

    /// The read replica, when configured.
    pub fn replica(&self) -> Option<&Store> {
        self.replica.as_ref()
    }

    /// The replica's last measured state (see [`ReplicaLag`]).
    pub fn replica_lag(&self) -> &ReplicaLag {
        &self.replica_lag
    }

    pub fn pubsub(&self) -> &PubSub {
        &self.pubsub
    }

    /// The anonymous response cache, when enabled.
    pub fn responses(&self) -> Option<&Arc<ResponseCache>> {
        self.responses.as_ref()
    }

    /// The automatic persisted queries' documents.
    pub fn persisted(&self) -> &PersistedQueries {
        &self.persisted
    }
}

/// How far the read replica is behind the primary, measured every second
/// by [`ReplicaLag::sample`]'s task: bytes of the replication stream not
/// yet applied (-1: unknown, e.g. a side did not answer), and whether its
/// link to the primary is up. `/health` and `/metrics` show it.
#[derive(Debug)]
pub struct ReplicaLag {
    bytes: AtomicI64,
    link_up: AtomicBool,
}

impl Default for ReplicaLag {
    fn default() -> Self {
        Self {
            bytes: AtomicI64::new(-1),
            link_up: AtomicBool::new(false),
        }
    }
}

impl ReplicaLag {
    pub fn bytes(&self) -> i64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn link_up(&self) -> bool {
        self.link_up.load(Ordering::Relaxed)
    }

    /// Measures once: the primary's replication offset against the
    /// replica's.
    pub async fn sample(&self, primary: &Store, replica: &Store) {
        let (ours, theirs) = futures_util::join!(primary.replication(), replica.replication());
        let offset = |info: &std::collections::HashMap<String, String>, key: &str| {
            info.get(key).and_then(|v| v.parse::<i64>().ok())
        };
        let (bytes, up) = match (ours, theirs) {
            (Ok(ours), Ok(theirs)) => {
                let up = theirs.get("master_link_status").is_some_and(|s| s == "up");
                let lag = offset(&ours, "master_repl_offset")
                    .zip(offset(&theirs, "slave_repl_offset"))
                    .map_or(-1, |(p, r)| (p - r).max(0));
                (lag, up)
            }
            _ => (-1, false),
        };
        self.bytes.store(bytes, Ordering::Relaxed);
        self.link_up.store(up, Ordering::Relaxed);
    }
}
