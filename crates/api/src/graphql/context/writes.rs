//! Writes: each one a single atomic write in the store, then what it
//! changes dropped from the response cache.

use std::sync::Arc;

use async_graphql::Result;

use super::RequestContext;
use crate::domain::{ArticleId, ArticleTitle, GroupName, Link, Slug, VoteDirection};
use crate::error::AppError;
use crate::pubsub::ScoreEvent;
use crate::store::{ArticleRecord, Viewer};

impl RequestContext {
    pub async fn post(
        &self,
        title: &ArticleTitle,
        link: &Link,
        groups: &[GroupName],
    ) -> Result<ArticleRecord> {
        let user = self.caller_required().await?.name;
        let id = self
            .routing
            .primary
            .post_article(&user, title, link, groups, self.app.rates.post)
            .await?;
        self.invalidate_all();
        self.reload(id).await
    }

    /// Sets the caller's vote. Only a vote that changed something drops
    /// cached pages, and only those it can change. The answer shows the
    /// vote cast: on a cluster, the caller's index may follow a moment
    /// later (see `store/outbox.rs`).
    pub async fn vote(&self, id: ArticleId, direction: VoteDirection) -> Result<ArticleRecord> {
        let caller = self.caller_required().await?;
        let changed = self
            .routing
            .primary
            .vote(id, &caller, direction, self.app.rates.vote)
            .await?;
        let mut article = self.reload(id).await?;
        article.my_vote = Some(direction);
        if let (true, Some(cache)) = (changed, &self.app.responses) {
            cache.vote(Arc::new(ScoreEvent {
                id: article.id.to_string(),
                score: article.score,
                votes: article.votes,
                downvotes: article.downvotes,
                at: 0.0,
                groups: article.groups.clone(),
            }));
        }
        Ok(article)
    }

    pub async fn rename_slug(&self, id: ArticleId, slug: &Slug) -> Result<ArticleRecord> {
        let caller = self.caller_required().await?;
        self.routing
            .primary
            .rename_slug(id, &caller, slug, self.app.rates.rename_slug)
            .await?;
        self.invalidate_all();
        self.reload(id).await
    }

    pub async fn set_groups(
        &self,
        id: ArticleId,
        add: &[GroupName],
        remove: &[GroupName],
    ) -> Result<ArticleRecord> {
        let caller = self.caller_required().await?;
        self.routing
            .primary
            .set_groups(id, &caller, add, remove, self.app.rates.set_groups)
            .await?;
        self.invalidate_all();
        self.reload(id).await
    }

    /// Counts a view once per viewer per window. Views do not invalidate
    /// cached pages: counts seen by anonymous readers may lag by a cache
    /// entry's age.
    pub async fn view(&self, id: ArticleId) -> Result<ArticleRecord> {
        self.session.refuse_banned(&self.routing.primary).await?;
        let viewer = match self.caller().await? {
            Some(caller) => Viewer::User(caller),
            None => Viewer::Client(self.client),
        };
        let limits = &self.app.rates;
        self.routing
            .primary
            .view_article(id, &viewer, limits.view, limits.view_window_secs)
            .await?;
        self.reload(id).await
    }

    pub(super) fn invalidate_all(&self) {
        if let Some(cache) = &self.app.responses {
            cache.invalidate();
        }
    }

    /// Reads an article after a write; it can only be gone if it was
    /// deleted behind votegraph's back in between. The write ran, so a
    /// failed read cannot answer that nothing was written.
    pub(super) async fn reload(&self, id: ArticleId) -> Result<ArticleRecord> {
        let read = self
            .article(id)
            .await
            .map_err(|e| AppError::OutcomeUnknown {
                cause: format!("reading article {id} back after a write: {}", e.message),
            })?;
        read.ok_or_else(|| crate::store::not_found(id).into())
    }
}
