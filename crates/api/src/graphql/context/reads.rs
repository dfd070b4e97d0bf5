//! Reads: ranked pages, feeds, articles, counts and karma, each
//! recording what the response shows.

use std::future::Future;
use std::sync::Arc;

use async_graphql::Result;
use tokio::sync::broadcast;

use super::{ArticleList, Feed, RequestContext};
use crate::cache::Deps;
use crate::domain::{ArticleId, GroupName, PageRequest, Ranking, UserName};
use crate::error::AppResult;
use crate::graphql::loaders::ArticleLoader;
use crate::pubsub::{PostedEvent, ScoreEvent};
use crate::store::{ArticleRecord, Cursor, DirectoryPage, GroupCursor, Order, Ranked, Standing};

impl RequestContext {
    /// One page of a ranked list, in order, without articles that vanished.
    /// It knows every id it needs, so it loads them at once, not through
    /// the DataLoader, whose batching delay would only add to every page.
    pub async fn ranked(
        &self,
        list: ArticleList<'_>,
        order: Order,
        page: PageRequest,
    ) -> Result<Vec<ArticleRecord>> {
        let store = &self.routing.primary;
        let ids = async {
            let ranking = match (order, list) {
                // Rankings pruned by period or cached: read by the feed
                // script, which builds a missing cache.
                (Order::Top(_), _)
                | (Order::Score, ArticleList::User(_))
                | (_, ArticleList::Queue) => {
                    let (start, size) = page.span();
                    let store = self.routing.store_for(list);
                    return store.ranked_page(list, order, start, size).await;
                }
                (Order::Score, _) => Ranking::Score,
                (Order::Time, _) => Ranking::Time,
            };
            match list {
                ArticleList::Site => self.routing.lagging.ranking_page(ranking, page).await,
                ArticleList::Group(group) => store.group_page(group, ranking, page).await,
                ArticleList::User(name) => Ok(unscored(store.user_newest_page(name, page).await?)),
                ArticleList::Queue => Ok(Vec::new()),
            }
        };
        let ids = self.with_session(ids).await?;
        let full = ids.len() == page.page_size as usize;
        self.shown(list, order, &ids, full).await
    }

    /// Runs `read` while the caller's session is looked up (for the
    /// loader), so a page with `myVote` waits for two round trips, not three.
    async fn with_session<T>(&self, read: impl Future<Output = AppResult<T>>) -> Result<T> {
        let (read, viewer) = futures_util::join!(read, self.session.user(&self.routing.primary));
        viewer?;
        Ok(read?)
    }

    /// Loads the articles of a page of `list` in `order`, recording what
    /// the page shows and what votes can change it (`full`: an article
    /// rising from below must pass the page's lowest to join it).
    async fn shown(
        &self,
        list: ArticleList<'_>,
        order: Order,
        ids: &[Ranked],
        full: bool,
    ) -> Result<Vec<ArticleRecord>> {
        self.recording
            .record(|deps| ids.iter().for_each(|(id, _)| deps.article(&id.to_string())));
        let mut found = self.routing.articles.loader().load_ranked(ids).await?;
        let articles: Vec<ArticleRecord> =
            ids.iter().filter_map(|(id, _)| found.remove(id)).collect();
        match order {
            Order::Score => self.recording.record(|deps| {
                let scores = articles.iter().map(|a| a.score);
                match list {
                    ArticleList::Site => deps.score_window(None, scores, full),
                    ArticleList::Group(g) => deps.score_window(Some(g.as_str()), scores, full),
                    // Any vote on the user's articles may reorder the page.
                    ArticleList::User(_) => deps.any_vote(),
                    // Read by moderators only, never cached.
                    ArticleList::Queue => {}
                }
            }),
            // Net votes are not in the vote events' scores: any vote may
            // reorder a net-vote page.
            Order::Top(_) => self.recording.record(Deps::any_vote),
            Order::Time => {}
        }
        Ok(articles)
    }

    /// A page of a feed: up to `first` articles of `list` in `order` after
    /// the cursor `after`, each with its own cursor.
    pub(crate) async fn feed(
        &self,
        list: ArticleList<'_>,
        order: Order,
        first: usize,
        after: Option<&str>,
    ) -> Result<Feed> {
        let position = after
            .map(|cursor| Cursor::decode(cursor, order, &list))
            .transpose()?;
        let page = self
            .with_session(
                self.routing
                    .store_for(list)
                    .feed(list, order, position.as_ref(), first),
            )
            .await?;
        let ids: Vec<Ranked> = page.entries.iter().map(|(ranked, _)| *ranked).collect();
        let full = page.has_next || ids.len() == first;
        let records = self.shown(list, order, &ids, full).await?;
        let mut cursors: std::collections::HashMap<_, _> = page
            .entries
            .iter()
            .map(|((id, _), position)| (*id, Cursor::encode(order, &list, position)))
            .collect();
        let edges = records
            .into_iter()
            .filter_map(|record| Some((cursors.remove(&record.id)?, record)))
            .collect();
        Ok(Feed {
            edges,
            has_next: page.has_next,
            total: page.total,
        })
    }

    /// One article (batched with the request's other single-article reads).
    pub async fn article(&self, id: ArticleId) -> Result<Option<ArticleRecord>> {
        self.recording.record(|deps| deps.article(&id.to_string()));
        self.routing.articles.load_one(id).await
    }

    /// One article, read at once: for a subscription event, where no other
    /// read could join the DataLoader's batch.
    pub(crate) async fn article_unbatched(&self, id: ArticleId) -> Result<Option<ArticleRecord>> {
        self.recording.record(|deps| deps.article(&id.to_string()));
        Ok(self
            .routing
            .articles
            .loader()
            .load_ranked(&[(id, None)])
            .await?
            .remove(&id))
    }

    pub(crate) async fn article_by_slug(&self, slug: &str) -> Result<Option<ArticleRecord>> {
        match self.routing.primary.article_id_by_slug(slug).await? {
            Some(id) => self.article(id).await,
            None => Ok(None),
        }
    }

    /// Number of ranked articles. A post through any instance invalidates
    /// cached responses, so counts need no record.
    pub(crate) async fn article_count(&self) -> Result<u64> {
        Ok(self.routing.lagging.article_count().await?)
    }

    pub(crate) async fn group_count(&self, group: &GroupName) -> Result<u64> {
        Ok(self.routing.primary.group_count(group).await?)
    }

    /// A page of the group directory after the cursor `after`. Votes do
    /// not change it; posts and group changes drop cached pages.
    pub async fn groups(&self, first: usize, after: Option<&str>) -> Result<DirectoryPage> {
        let position = after.map(GroupCursor::decode).transpose()?;
        Ok(self
            .routing
            .lagging
            .groups_page(position.as_ref(), first)
            .await?)
    }

    /// A user's karma and rank (batched); any vote may change them.
    pub async fn standing(&self, name: &str) -> Result<Option<Standing>> {
        self.recording.record(Deps::any_vote);
        self.routing.standings.load_one(name.to_owned()).await
    }

    /// The user `name` names, in any case, as `logIn` finds them
    /// (batched). Not recorded: a sign-up drops no cached response, and
    /// one lives a second.
    pub(crate) async fn user_named(&self, name: &UserName) -> Result<Option<UserName>> {
        self.routing.users.load_one(name.clone()).await
    }

    /// The karma leaderboard; any vote may change it.
    pub(crate) async fn top_posters(&self, limit: usize) -> Result<Vec<(String, i64)>> {
        self.recording.record(Deps::any_vote);
        Ok(self.routing.lagging.top_posters(limit).await?)
    }

    /// Score changes from now on, from the process' one pub/sub connection.
    pub(crate) fn score_events(&self) -> broadcast::Receiver<Arc<ScoreEvent>> {
        self.app.pubsub.subscribe()
    }

    /// Reads articles for a stream (new posts), as this request's caller;
    /// streams are never cached, so it records nothing.
    pub(crate) fn article_reader(&self) -> ArticleLoader {
        ArticleLoader::new(self.app.store.clone(), self.session.clone())
    }

    /// New posts from now on, from the same connection.
    pub(crate) fn posted_events(&self) -> broadcast::Receiver<Arc<PostedEvent>> {
        self.app.pubsub.subscribe_posts()
    }
}

/// Page entries read without scores (groups, a user's articles, newest).
fn unscored(ids: Vec<ArticleId>) -> Vec<Ranked> {
    ids.into_iter().map(|id| (id, None)).collect()
}
