//! The request-scoped DataLoader that turns every article lookup of a query
//! into one pipelined Redis batch.

use std::collections::HashMap;

use async_graphql::dataloader::Loader;

use crate::domain::ArticleId;
use crate::store::{ArticleRecord, Store};

pub struct ArticleLoader {
    store: Store,
}

impl ArticleLoader {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

impl Loader<ArticleId> for ArticleLoader {
    type Value = ArticleRecord;
    type Error = async_graphql::Error;

    async fn load(
        &self,
        keys: &[ArticleId],
    ) -> Result<HashMap<ArticleId, ArticleRecord>, Self::Error> {
        Ok(self.store.load_articles(keys).await?)
    }
}
