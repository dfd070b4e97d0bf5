//! Two small concurrency pieces every part of the server uses.
//!
//! [`lock`]: a panic while a lock is held poisons it; every structure
//! locked in this crate (caches, counters, registries) stays valid after
//! any single update, so a poisoned lock is taken as it is rather than
//! failing every later request.
//!
//! [`AbortOnDrop`]: background work (the pub/sub listener, the backfills,
//! the upkeep) must stop with what started it, or tests that run many
//! servers in one process would keep their tasks alive.

use std::sync::{Mutex, MutexGuard};

use tokio::task::JoinHandle;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A spawned task that is aborted when this handle is dropped.
pub struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
