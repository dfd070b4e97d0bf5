//! Live score updates, fed by the process' single pub/sub connection.

use std::sync::Arc;

use async_graphql::{Context, Object, Result, Subscription, ID};
use futures_util::Stream;

use super::shared_subscriptions::receiving;
use super::types::{Article, DateTime};
use super::RequestContext;
use crate::domain::{ArticleId, GroupName};
use crate::pubsub::{next_wanted, PostedEvent, ScoreEvent};

#[derive(Default)]
pub(crate) struct SubscriptionRoot;

#[Subscription]
impl SubscriptionRoot {
    /// Every score change from now on: all of them, one article's, or those
    /// of articles in one group (both filters may be combined). A client
    /// that reads too slowly skips the oldest events it missed.
    async fn score_changed(
        &self,
        ctx: &Context<'_>,
        article_id: Option<ID>,
        group: Option<String>,
    ) -> Result<impl Stream<Item = ScoreChange>> {
        let article = article_id
            .map(|id| ArticleId::parse(&id, "articleId"))
            .transpose()?;
        let group = group
            .map(|g| GroupName::parse_field(&g, "group"))
            .transpose()?;
        let article = article.map(|id| id.to_string());
        let events = receiving(ctx, RequestContext::of(ctx)?.score_events());
        Ok(futures_util::stream::unfold(
            events,
            move |(mut receiver, uncounted)| {
                let (article, group) = (article.clone(), group.clone());
                async move {
                    let event = next_wanted(&mut receiver, |event: &ScoreEvent| {
                        article.as_ref().is_none_or(|a| *a == event.id)
                            && group
                                .as_ref()
                                .is_none_or(|g| event.groups.iter().any(|e| e == g.as_str()))
                    })
                    .await?;
                    Some((ScoreChange(event), (receiver, uncounted)))
                }
            },
        ))
    }

    /// Every article posted from now on (through any instance), or only
    /// those posted to `group`. Articles added to a group later
    /// (`setGroups`) are not new posts. A client that reads too slowly
    /// skips the oldest posts it missed.
    async fn article_posted(
        &self,
        ctx: &Context<'_>,
        group: Option<String>,
    ) -> Result<impl Stream<Item = Article>> {
        let group = group
            .map(|g| GroupName::parse_field(&g, "group"))
            .transpose()?;
        let context = RequestContext::of(ctx)?;
        let events = receiving(ctx, context.posted_events());
        let reader = context.article_reader();
        Ok(futures_util::stream::unfold(
            (events, group, reader),
            move |((mut receiver, uncounted), group, reader)| async move {
                loop {
                    let event = next_wanted(&mut receiver, |event: &PostedEvent| {
                        group
                            .as_ref()
                            .is_none_or(|g| event.groups.iter().any(|e| e == g.as_str()))
                    })
                    .await?;
                    let Ok(id) = ArticleId::parse(&event.id, "id") else {
                        continue;
                    };
                    // Read as it is now; an article gone meanwhile, or a
                    // failed read, is skipped rather than ending the stream.
                    match reader.load_ranked(&[(id, None)]).await {
                        Ok(mut found) => {
                            let record = found.remove(&id).filter(|r| !r.status.is_out());
                            if let Some(record) = record {
                                let state = ((receiver, uncounted), group, reader);
                                return Some((Article(record), state));
                            }
                        }
                        Err(e) => tracing::warn!(error = ?e, "reading a posted article failed"),
                    }
                }
            },
        ))
    }
}

pub(crate) struct ScoreChange(Arc<ScoreEvent>);

/// One change of an article's score.
#[Object]
impl ScoreChange {
    /// The article as it is when the event is delivered (read only when
    /// selected).
    async fn article(&self, ctx: &Context<'_>) -> Result<Article> {
        let id = ArticleId::parse(&self.0.id, "articleId")?;
        let record = RequestContext::of(ctx)?.article_unbatched(id).await?;
        Ok(Article(record.ok_or_else(|| crate::store::not_found(id))?))
    }

    /// The score right after the vote.
    async fn score(&self) -> f64 {
        self.0.score
    }

    /// Upvotes right after the vote.
    async fn votes(&self) -> i64 {
        self.0.votes
    }

    /// Downvotes right after the vote.
    async fn downvotes(&self) -> i64 {
        self.0.downvotes
    }

    /// When the vote was made.
    async fn at(&self) -> DateTime {
        DateTime(self.0.at)
    }
}
