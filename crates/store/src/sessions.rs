//! Ended logins close their WebSockets (4403) on every instance within a
//! second: `logOut` announces the token hash over pub/sub, and a sweep every
//! [`SWEEP_INTERVAL`] catches expiry and lost announcements. A sweep that
//! cannot reach Redis ends nothing: an outage is not a logout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use crate::pubsub::{next_wanted, PubSub};
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

#[derive(Default)]
struct Inner {
    /// Token hash → the channel its sockets watch (one receiver each).
    open: Mutex<HashMap<Arc<str>, watch::Sender<bool>>>,
    ended: AtomicU64,
}

/// One socket's hold on its session; dropping it (the socket closed)
/// forgets the socket.
pub struct Watched {
    inner: Arc<Inner>,
    hash: Arc<str>,
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
        // Not ended, the entry is this socket's channel, whose receiver is
        // still alive here: one receiver means the last.
        let last = open
            .get(&self.hash)
            .is_some_and(|s| s.receiver_count() == 1);
        if last && !*self.ended.borrow() {
            open.remove(&self.hash);
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
        let hash: Arc<str> = Arc::from(token_hash);
        let mut open = self.inner.open.lock();
        let sender = open.entry(hash.clone()).or_default();
        Watched {
            inner: self.inner.clone(),
            hash,
            ended: sender.subscribe(),
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
        if let Some(sender) = self.open.lock().remove(hash) {
            let sockets = sender.receiver_count() as u64;
            self.ended.fetch_add(sockets, Ordering::Relaxed);
            sender.send_replace(true);
        }
    }
}

async fn run(inner: Arc<Inner>, store: Store, mut announced: broadcast::Receiver<Arc<str>>) {
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Missed announcements are caught by the next sweep.
            hash = next_wanted(&mut announced, |_| true) => match hash {
                Some(hash) => inner.end(&hash),
                None => return,
            },
            _ = sweep.tick() => sweep_once(&inner, &store).await,
        }
    }
}

/// Ends the watched sessions Redis no longer has.
async fn sweep_once(inner: &Inner, store: &Store) {
    let hashes: Vec<Arc<str>> = inner.open.lock().keys().cloned().collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_is_watched_while_a_socket_uses_it() {
        let watch = SessionWatch {
            inner: Arc::default(),
            _task: Arc::new(AbortOnDropHandle::new(tokio::spawn(async {}))),
        };
        let (a, b) = (watch.watch("h"), watch.watch("h"));
        assert_eq!(watch.sessions(), 1);
        drop(a);
        assert_eq!(watch.sessions(), 1);
        drop(b);
        assert_eq!(watch.sessions(), 0, "no entry left once its sockets close");
        let (mut c, d) = (watch.watch("h"), watch.watch("h"));
        watch.inner.end("h");
        c.ended().await;
        assert_eq!(watch.ended_sockets(), 2);
        let e = watch.watch("h");
        drop(d);
        assert_eq!(watch.sessions(), 1, "an ended socket leaves a new entry be");
        drop((c, e));
        assert_eq!(watch.sessions(), 0);
    }
}
