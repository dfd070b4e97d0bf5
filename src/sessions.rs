//! Ended logins close their WebSockets (4403) on every instance within a
//! second (docs/api.md). A socket authenticates once and may live for days,
//! so each instance watches the token hashes of its sockets: `logOut`
//! announces the hash over pub/sub, and a sweep every [`SWEEP_INTERVAL`]
//! asks Redis which sessions still exist, catching expiry and lost
//! announcements. A sweep that cannot reach Redis ends nothing: an outage
//! is not a logout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use crate::pubsub::PubSub;
use crate::store::Store;
use tokio_util::task::AbortOnDropHandle;

/// How often the open sockets' sessions are checked in Redis.
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(500);

/// Tokens checked per round trip of a sweep.
const SWEEP_BATCH: usize = 1_000;

/// The authenticated sockets of this process, by token hash; cheap to
/// clone.
#[derive(Clone)]
pub struct SessionWatch {
    inner: Arc<Inner>,
    _task: Arc<AbortOnDropHandle<()>>,
}

/// The sockets using one login, by socket id.
type Sockets = HashMap<u64, watch::Sender<bool>>;

#[derive(Default)]
struct Inner {
    /// Token hash → the sockets using it.
    open: Mutex<HashMap<Arc<str>, Sockets>>,
    next_id: AtomicU64,
    ended: AtomicU64,
}

/// One socket's hold on its session; dropping it (the socket closed)
/// forgets the socket.
pub struct Watched {
    inner: Arc<Inner>,
    hash: Arc<str>,
    id: u64,
    ended: watch::Receiver<bool>,
}

impl Watched {
    /// Resolves once the session has ended (at once if it already has).
    pub async fn ended(&mut self) {
        // An error means the sender is gone, which only the end does.
        let _ = self.ended.wait_for(|ended| *ended).await;
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let mut open = self.inner.open.lock();
        if let Some(sockets) = open.get_mut(&self.hash) {
            sockets.remove(&self.id);
            if sockets.is_empty() {
                open.remove(&self.hash);
            }
        }
    }
}

impl SessionWatch {
    /// Starts ending sessions as `pubsub` announces them and as the sweep
    /// of `store` finds them gone.
    pub fn start(store: Store, pubsub: &PubSub) -> Self {
        let inner = Arc::new(Inner::default());
        let announced = pubsub.subscribe_ended_sessions();
        let task = tokio::spawn(run(inner.clone(), store, announced));
        Self {
            inner,
            _task: Arc::new(AbortOnDropHandle::new(task)),
        }
    }

    /// Watches the session of `token_hash` for one socket.
    pub fn watch(&self, token_hash: &str) -> Watched {
        let (sender, ended) = watch::channel(false);
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let hash: Arc<str> = Arc::from(token_hash);
        self.inner
            .open
            .lock()
            .entry(hash.clone())
            .or_default()
            .insert(id, sender);
        Watched {
            inner: self.inner.clone(),
            hash,
            id,
            ended,
        }
    }

    /// Distinct sessions watched now.
    pub fn sessions(&self) -> usize {
        self.inner.open.lock().len()
    }

    /// Sockets ended because their session did, ever.
    pub fn ended_sockets(&self) -> u64 {
        self.inner.ended.load(Ordering::Relaxed)
    }
}

impl Inner {
    /// Tells every socket of `hash` that its session ended.
    fn end(&self, hash: &str) {
        if let Some(sockets) = self.open.lock().remove(hash) {
            self.ended
                .fetch_add(sockets.len() as u64, Ordering::Relaxed);
            for sender in sockets.values() {
                sender.send_replace(true);
            }
        }
    }

    fn hashes(&self) -> Vec<Arc<str>> {
        self.open.lock().keys().cloned().collect()
    }
}

async fn run(inner: Arc<Inner>, store: Store, mut announced: broadcast::Receiver<Arc<str>>) {
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            hash = announced.recv() => match hash {
                Ok(hash) => inner.end(&hash),
                // Missed announcements are caught by the next sweep.
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = sweep.tick() => sweep_once(&inner, &store).await,
        }
    }
}

/// Ends the watched sessions Redis no longer has.
async fn sweep_once(inner: &Inner, store: &Store) {
    let hashes = inner.hashes();
    for batch in hashes.chunks(SWEEP_BATCH) {
        let batch: Vec<&str> = batch.iter().map(|h| &**h).collect();
        match store.ended_sessions(&batch).await {
            Ok(ended) => ended.into_iter().for_each(|hash| inner.end(hash)),
            Err(e) => {
                tracing::warn!(error = %e, "checking the WebSockets' sessions failed; retrying");
                return;
            }
        }
    }
}
