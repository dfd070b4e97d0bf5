//! Where a request's reads go: the primary, or the read replica for an
//! anonymous query; its loaders read from the same place.

use std::sync::Arc;

use async_graphql::dataloader::DataLoader;

use super::ArticleList;
use crate::auth::Session;
use crate::graphql::loaders::{AccountLoader, ArticleLoader, StandingLoader, UserLoader};
use crate::store::Store;

pub(super) struct Routing {
    /// Writes and reads that must see them.
    pub(super) primary: Store,
    /// Reads that may lag: the site's rankings, articles, karma, counts,
    /// the directory.
    pub(super) lagging: Store,
    pub(super) articles: DataLoader<ArticleLoader>,
    pub(super) standings: DataLoader<StandingLoader>,
    pub(super) users: DataLoader<UserLoader>,
    /// Roles and bans, from the primary.
    pub(super) accounts: DataLoader<AccountLoader>,
}

impl Routing {
    /// Reads that may lag on `lagging` (the primary, or a replica), the
    /// rest on `primary`.
    pub(super) fn new(primary: &Store, lagging: &Store, session: &Arc<Session>) -> Self {
        Self {
            primary: primary.clone(),
            lagging: lagging.clone(),
            articles: DataLoader::new(
                ArticleLoader::new(lagging.clone(), session.clone()),
                tokio::spawn,
            ),
            standings: DataLoader::new(StandingLoader(lagging.clone()), tokio::spawn),
            users: DataLoader::new(UserLoader(lagging.clone()), tokio::spawn),
            accounts: DataLoader::new(AccountLoader(primary.clone()), tokio::spawn),
        }
    }

    /// Where reads of `list` go: the site's rankings may be read from the
    /// replica; a group's or a user's may have to be built (a write).
    pub(super) fn store_for(&self, list: ArticleList<'_>) -> &Store {
        match list {
            ArticleList::Site => &self.lagging,
            _ => &self.primary,
        }
    }
}
