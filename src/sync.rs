//! Background work that stops with what started it.
//!
//! [`AbortOnDrop`]: background work (the pub/sub listener, the backfills,
//! the upkeep) must stop with what started it, or tests that run many
//! servers in one process would keep their tasks alive.

use tokio::task::JoinHandle;

/// A spawned task that is aborted when this handle is dropped.
pub struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
