//! Request-scoped DataLoaders: every article (or user standing) a query
//! touches is read in one pipelined Redis batch.

use std::collections::HashMap;
use std::sync::Arc;

use async_graphql::dataloader::Loader;

use crate::auth::Session;
use crate::domain::{ArticleId, UserName};
use crate::store::{Account, ArticleRecord, Ranked, Standing, Store};

/// Loads articles, with the caller's vote on each when logged in.
pub(crate) struct ArticleLoader {
    store: Store,
    session: Arc<Session>,
}

impl ArticleLoader {
    pub fn new(store: Store, session: Arc<Session>) -> Self {
        Self { store, session }
    }

    /// Loads the articles of a ranking page, with the scores its read
    /// already gave (see [`Ranked`]).
    pub(crate) async fn load_ranked(
        &self,
        entries: &[Ranked],
    ) -> Result<HashMap<ArticleId, ArticleRecord>, async_graphql::Error> {
        let viewer = self.session.user(&self.store).await?;
        Ok(self.store.load_ranked(entries, viewer.as_ref()).await?)
    }
}

impl Loader<ArticleId> for ArticleLoader {
    type Value = ArticleRecord;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[ArticleId],
    ) -> Result<HashMap<ArticleId, ArticleRecord>, Self::Error> {
        let entries: Vec<Ranked> = keys.iter().map(|&id| (id, None)).collect();
        self.load_ranked(&entries).await
    }
}

/// Users' roles and bans, by name.
pub(crate) struct AccountLoader(pub Store);

impl Loader<String> for AccountLoader {
    type Value = Account;
    type Error = async_graphql::Error;

    async fn load(&self, keys: &[String]) -> Result<HashMap<String, Account>, Self::Error> {
        Ok(self.0.accounts(keys).await?)
    }
}

pub(crate) struct StandingLoader(pub Store);

impl Loader<String> for StandingLoader {
    type Value = Standing;
    type Error = async_graphql::Error;

    async fn load(&self, keys: &[String]) -> Result<HashMap<String, Standing>, Self::Error> {
        Ok(self.0.standings(keys).await?)
    }
}

/// The user each name names (any case, as `logIn` finds it): for
/// `node(id: "user:…")` and `modLog(user:)`.
pub(crate) struct UserLoader(pub Store);

impl Loader<UserName> for UserLoader {
    type Value = UserName;
    type Error = async_graphql::Error;

    async fn load(&self, keys: &[UserName]) -> Result<HashMap<UserName, UserName>, Self::Error> {
        Ok(self.0.user_names(keys).await?)
    }
}
