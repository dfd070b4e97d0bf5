//! What every request of the process shares, registered once.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use crate::auth::PasswordHasher;
use crate::cache::ResponseCache;
use crate::persisted::PersistedQueries;
use crate::pubsub::PubSub;
use crate::rate::RateLimits;
use crate::store::{LoginLimit, Store};

pub struct AppState {
    pub store: Store,
    /// `--redis-replica-url`: where anonymous reads of the site's rankings
    /// and articles may go (see `RequestContext::on_replica`).
    pub replica: Option<Store>,
    pub replica_lag: ReplicaLag,
    pub hasher: PasswordHasher,
    pub pubsub: PubSub,
    pub responses: Option<Arc<ResponseCache>>,
    pub persisted: PersistedQueries,
    pub login: LoginLimit,
    pub rates: RateLimits,
}

/// How far the read replica is behind the primary, sampled every second:
/// bytes not yet applied (-1: unknown), and whether its link is up.
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
