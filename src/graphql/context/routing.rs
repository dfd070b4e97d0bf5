//! Where a request's reads go: the primary, or the read replica for an
//! anonymous query; its loaders read from the same place.

use std::sync::Arc;

use async_graphql::dataloader::DataLoader;

use super::ArticleList;
use crate::auth::Session;
use crate::graphql::loaders::{AccountLoader, ArticleLoader, StandingLoader};
use crate::store::Store;

pub(super) struct Routing {
    primary: Store,
    /// Where reads of the site's rankings, of articles and of karma go.
    reads: Store,
    articles: DataLoader<ArticleLoader>,
    standings: DataLoader<StandingLoader>,
    accounts: DataLoader<AccountLoader>,
}

impl Routing {
    /// Every read on the primary.
    pub(super) fn primary(primary: &Store, session: &Arc<Session>) -> Self {
        Self::reading(primary, primary, session)
    }

    /// Reads that may go to a replica on `replica`; the rest stays on the
    /// primary.
    pub(super) fn with_replica(self, replica: &Store, session: &Arc<Session>) -> Self {
        Self::reading(&self.primary, replica, session)
    }

    fn reading(primary: &Store, reads: &Store, session: &Arc<Session>) -> Self {
        Self {
            primary: primary.clone(),
            reads: reads.clone(),
            articles: DataLoader::new(
                ArticleLoader::new(reads.clone(), session.clone()),
                tokio::spawn,
            ),
            standings: DataLoader::new(StandingLoader::new(reads.clone()), tokio::spawn),
            accounts: DataLoader::new(AccountLoader::new(primary.clone()), tokio::spawn),
        }
    }

    /// Writes and reads that must see them.
    pub(super) fn primary_store(&self) -> &Store {
        &self.primary
    }

    /// Reads that may lag: the site's rankings, counts, the directory.
    pub(super) fn lagging_store(&self) -> &Store {
        &self.reads
    }

    /// Where reads of `list` go: the site's rankings may be read from the
    /// replica; a group's or a user's may have to be built (a write).
    pub(super) fn store_for(&self, list: ArticleList<'_>) -> &Store {
        match list {
            ArticleList::Site => &self.reads,
            _ => &self.primary,
        }
    }

    pub(super) fn articles(&self) -> &DataLoader<ArticleLoader> {
        &self.articles
    }

    pub(super) fn standings(&self) -> &DataLoader<StandingLoader> {
        &self.standings
    }

    pub(super) fn accounts(&self) -> &DataLoader<AccountLoader> {
        &self.accounts
    }
}
