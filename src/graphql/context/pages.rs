//! Ranked pages a request has read, so the same page asked for again in
//! one document (aliases) is read from Redis once more at most.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use async_graphql::Result;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use crate::store::ArticleRecord;

/// Pages by list, order and page. The first reader of a page keeps its
/// records (no copy on the common path: a page read once); from the second,
/// the records are read into a cell that later askers copy from, waiting
/// for the read when it is under way.
#[derive(Default)]
pub(super) struct PageMemo(Mutex<HashMap<String, Option<PageCell>>>);

/// A page read a second time: read once more, then shared.
type PageCell = Arc<OnceCell<Vec<ArticleRecord>>>;

impl PageMemo {
    /// The page under `key`, read by `read` unless it was read before.
    pub(super) async fn get_or_read<F, Fut>(
        &self,
        key: String,
        read: F,
    ) -> Result<Vec<ArticleRecord>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<ArticleRecord>>>,
    {
        let cell = {
            let mut pages = self.0.lock();
            match pages.get_mut(&key) {
                None => {
                    pages.insert(key, None);
                    None
                }
                Some(cell) => Some(cell.get_or_insert_with(Arc::default).clone()),
            }
        };
        match cell {
            None => read().await,
            Some(cell) => Ok(cell.get_or_try_init(read).await?.clone()),
        }
    }
}
