//! The one door resolvers go through: the process' [`AppState`], and each
//! request's [`RequestContext`] in front of the [`Store`].
//!
//! Anonymous responses are cached whole (see [`crate::cache`]), which is
//! only correct if the cache learns everything a response shows and every
//! write drops what it changes. Those duties live here, not in resolvers:
//! every read of the context records what it returns, and every write
//! invalidates what it changes. Resolvers never see the store or the cache,
//! so a new resolver cannot show data the cache does not know about, nor
//! write without invalidating.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;

use async_graphql::dataloader::DataLoader;
use async_graphql::{Context, Result};
use tokio::sync::{broadcast, OnceCell};

use super::loaders::{ArticleLoader, StandingLoader};
use crate::auth::{new_token, token_hash, Session};
use crate::cache::{Deps, DepsCollector};
use crate::client_addr::ClientAddr;
use crate::domain::Ranking;
use crate::domain::UserName;
use crate::domain::{
    ArticleId, ArticleTitle, GroupName, Link, PageRequest, Password, Slug, VoteDirection,
};
use crate::error::{AppError, AppResult};
use crate::pubsub::{PostedEvent, ScoreEvent};
use crate::state::AppState;
use crate::store::{
    ArticleRecord, Cursor, DirectoryPage, GroupCursor, List, Order, Ranked, Standing, Store, Viewer,
};
use crate::templates::{Counted, Holes};

/// Which ranked list of articles a page comes from.
#[derive(Clone, Copy, Debug)]
pub enum ArticleList<'a> {
    Site,
    Group(&'a GroupName),
    User(&'a str),
}

/// One request's view of the application: its caller, its own loaders (so
/// batching never mixes requests and nothing is cached between them), and,
/// when its response may be cached, the record of what it shows.
pub struct RequestContext {
    app: Arc<AppState>,
    /// Where this request's reads of the site's rankings and of articles
    /// go: the primary, or a replica for an anonymous HTTP query.
    reads: Store,
    session: Arc<Session>,
    client: ClientAddr,
    deps: Option<DepsCollector>,
    /// Set when the request computes a logged-in page's template.
    holes: Option<Arc<Holes>>,
    articles: DataLoader<ArticleLoader>,
    standings: DataLoader<StandingLoader>,
    /// Pages this request has read, by list, order and page: the same page
    /// asked for again in one document (aliases) is read from Redis once
    /// more at most. None for a WebSocket connection's context, which
    /// outlives any one operation.
    pages: Option<PageMemo>,
}

/// Pages by list, order and page. The first reader of a page keeps its
/// records (no copy on the common path: a page read once); from the second,
/// the records are read into a cell that later askers copy from, waiting
/// for the read when it is under way.
type PageMemo = Mutex<HashMap<String, Option<Arc<OnceCell<Vec<ArticleRecord>>>>>>;

impl RequestContext {
    /// The context of a request whose response is not cached.
    pub fn new(app: &Arc<AppState>, session: Session, client: ClientAddr) -> Self {
        Self::build(app, session, client, None)
    }

    /// The context of an anonymous request whose response may be cached
    /// (a logged-in query's template is computed anonymously, too):
    /// it records what the response shows (see [`Deps`]) and where it
    /// shows each `myVote` and count (see [`Holes`]), so the response can
    /// be kept as a template that votes patch. Only for one request: a
    /// connection's record would grow without end.
    pub fn recorded(app: &Arc<AppState>, client: ClientAddr) -> Self {
        let session = Session::from_authorization(None);
        Self {
            holes: Some(Arc::default()),
            ..Self::build(app, session, client, Some(DepsCollector::default()))
        }
    }

    fn build(
        app: &Arc<AppState>,
        session: Session,
        client: ClientAddr,
        deps: Option<DepsCollector>,
    ) -> Self {
        let session = Arc::new(session);
        let store = app.store.clone();
        Self {
            reads: store.clone(),
            articles: DataLoader::new(
                ArticleLoader::new(store.clone(), session.clone()),
                tokio::spawn,
            ),
            standings: DataLoader::new(StandingLoader::new(store), tokio::spawn),
            app: app.clone(),
            session,
            client,
            deps,
            holes: None,
            pages: Some(Mutex::default()),
        }
    }

    /// Sends this request's reads of the site's rankings, of articles and
    /// of karma to the read replica, if there is one. Only for anonymous
    /// HTTP queries: a logged-in reader reads the primary, so they always
    /// see their own writes (and so do logged-in pages' templates), and so
    /// do subscriptions, whose events come from the primary. Group and
    /// user rankings stay on the primary too: building a cached one writes.
    /// A replica lags by milliseconds; anonymous pages are cached for up to
    /// a second anyway. A replica whose link to the primary is down (or
    /// that stopped answering) at the last measurement is not used: reads
    /// go back to the primary within a second.
    pub fn on_replica(mut self) -> Self {
        let usable = self.app.replica_lag.link_up();
        if let (Some(replica), None, true) = (&self.app.replica, self.session.token(), usable) {
            self.reads = replica.clone();
            self.articles = DataLoader::new(
                ArticleLoader::new(replica.clone(), self.session.clone()),
                tokio::spawn,
            );
            self.standings = DataLoader::new(StandingLoader::new(replica.clone()), tokio::spawn);
        }
        self
    }

    /// The context a resolver runs in.
    pub(crate) fn of<'a>(ctx: &Context<'a>) -> Result<&'a Self> {
        ctx.data::<Self>()
            .map_err(|_| AppError::Internal("a request ran without its context".to_owned()).into())
    }

    /// Attaches the context to a GraphQL request; the handle it returns
    /// gives what the response showed, once it ran (None when not
    /// recorded).
    pub fn attach(self, request: async_graphql::Request) -> (async_graphql::Request, Recorded) {
        let recorded = Recorded(self.deps.clone(), self.holes.clone());
        (request.data(self), recorded)
    }

    /// The context of every operation of one WebSocket connection.
    pub fn into_connection_data(self) -> async_graphql::Data {
        let mut data = async_graphql::Data::default();
        data.insert(Self {
            pages: None,
            ..self
        });
        data
    }

    fn record(&self, f: impl FnOnce(&mut Deps)) {
        if let Some(deps) = &self.deps {
            f(&mut deps.lock());
        }
    }

    fn store(&self) -> &Store {
        &self.app.store
    }

    /// Where reads of `list` go: the site's rankings may be read from the
    /// replica; a group's or a user's may have to be built (a write).
    fn store_for(&self, list: ArticleList<'_>) -> &Store {
        match list {
            ArticleList::Site => &self.reads,
            _ => self.store(),
        }
    }

    /// The logged-in user, looked up once per request.
    pub async fn viewer(&self) -> Result<Option<UserName>> {
        self.shows_caller();
        Ok(self.session.user(self.store()).await?)
    }

    /// A template cannot show who its caller is: it is computed for
    /// nobody and served to everyone.
    fn shows_caller(&self) {
        if let Some(holes) = &self.holes {
            holes.personal();
        }
    }

    /// The caller's vote on `article`. A template leaves a hole there,
    /// filled per reader.
    pub fn my_vote(&self, ctx: &Context<'_>, article: &ArticleRecord) -> Option<VoteDirection> {
        match &self.holes {
            Some(holes) => {
                holes.hole(ctx.path_node.as_ref(), article.id);
                None
            }
            None => article.my_vote,
        }
    }

    /// A count of an article that a vote changes, shown at `ctx`'s path: a
    /// template records where, so a vote's event can patch it in place.
    pub fn counted(
        &self,
        ctx: &Context<'_>,
        id: ArticleId,
        counted: Counted,
        value: impl Into<async_graphql::Value>,
    ) {
        if let Some(holes) = &self.holes {
            holes.count(ctx.path_node.as_ref(), id, counted, &value.into());
        }
    }

    /// The logged-in user, or `UNAUTHENTICATED`. Writes check it again
    /// themselves; resolvers call it first so that an anonymous caller
    /// hears about the login before any complaint about its input (the
    /// lookup is made once per request).
    pub async fn viewer_required(&self) -> Result<UserName> {
        self.shows_caller();
        Ok(self.session.require_user(self.store()).await?)
    }

    /// One page of a ranked list, in order, without articles that vanished.
    ///
    /// The caller's session is looked up while the range is read (see
    /// [`RequestContext::with_session`]). The page knows every id it needs, so it loads them at
    /// once rather than through the DataLoader, whose batching delay
    /// would only add to every page.
    pub async fn ranked(
        &self,
        list: ArticleList<'_>,
        order: Order,
        page: PageRequest,
    ) -> Result<Vec<ArticleRecord>> {
        let Some(pages) = &self.pages else {
            return self.read_ranked(list, order, page).await;
        };
        let key = format!("{list:?}|{order:?}|{}|{}", page.page, page.page_size);
        let cell = {
            let mut pages = pages.lock();
            match pages.get_mut(&key) {
                None => {
                    pages.insert(key, None);
                    None
                }
                Some(cell) => Some(cell.get_or_insert_with(Arc::default).clone()),
            }
        };
        let Some(cell) = cell else {
            return self.read_ranked(list, order, page).await;
        };
        let records = cell
            .get_or_try_init(|| self.read_ranked(list, order, page))
            .await?;
        Ok(records.clone())
    }

    async fn read_ranked(
        &self,
        list: ArticleList<'_>,
        order: Order,
        page: PageRequest,
    ) -> Result<Vec<ArticleRecord>> {
        let store = self.store();
        let ids = async {
            let ranking = match (order, list) {
                // Rankings pruned by period or cached: read by the feed
                // script, which builds a missing cache.
                (Order::Top(_), _) | (Order::Score, ArticleList::User(_)) => {
                    let (start, stop) = page.range();
                    let size = (stop - start + 1) as usize;
                    return self
                        .store_for(list)
                        .ranked_page(list.into(), order, start as usize, size)
                        .await;
                }
                (Order::Score, _) => Ranking::Score,
                (Order::Time, _) => Ranking::Time,
            };
            match list {
                ArticleList::Site => self.reads.ranking_page(ranking, page).await,
                ArticleList::Group(group) => store.group_page(group, ranking, page).await,
                ArticleList::User(name) => Ok(unscored(store.user_newest_page(name, page).await?)),
            }
        };
        let ids = self.with_session(ids).await?;
        let full = ids.len() == page.page_size as usize;
        self.shown(list, order, &ids, full, page.page == 1).await
    }

    /// Runs `read` while the caller's session is looked up, so a page
    /// with `myVote` waits for two round trips in a row, not three. The
    /// lookup only warms the session for the loader (a template's is
    /// anonymous): it shows nothing of the caller by itself.
    async fn with_session<T>(&self, read: impl Future<Output = AppResult<T>>) -> Result<T> {
        let (read, viewer) = futures_util::join!(read, self.session.user(self.store()));
        viewer?;
        Ok(read?)
    }

    /// Loads the articles of a page of `list` in `order`, recording what
    /// the page shows: its articles, and what votes can change it (`full`:
    /// the page has as many articles as it could hold, so an article
    /// rising from below must pass its lowest one to join it).
    async fn shown(
        &self,
        list: ArticleList<'_>,
        order: Order,
        ids: &[Ranked],
        full: bool,
        top: bool,
    ) -> Result<Vec<ArticleRecord>> {
        self.record(|deps| ids.iter().for_each(|(id, _)| deps.article(&id.to_string())));
        let mut found = self.articles.loader().load_ranked(ids).await?;
        let articles: Vec<ArticleRecord> =
            ids.iter().filter_map(|(id, _)| found.remove(id)).collect();
        match order {
            Order::Score => self.record(|deps| {
                let members = || {
                    articles
                        .iter()
                        .map(|a| (a.id.to_string(), a.score))
                        .collect()
                };
                match list {
                    ArticleList::Site => deps.score_window(None, members(), full, top),
                    ArticleList::Group(g) => {
                        deps.score_window(Some(g.as_str()), members(), full, top)
                    }
                    // Any vote on the user's articles may reorder the page.
                    ArticleList::User(_) => deps.any_vote(),
                }
            }),
            // Net votes are not in the vote events' scores: any vote may
            // reorder a net-vote page.
            Order::Top(_) => self.record(Deps::any_vote),
            Order::Time => {}
        }
        Ok(articles)
    }

    /// A page of a feed: up to `first` articles of `list` in `order` after
    /// the cursor `after`, each with its own cursor.
    pub async fn feed(
        &self,
        list: ArticleList<'_>,
        order: Order,
        first: usize,
        after: Option<&str>,
    ) -> Result<Feed> {
        let position = after
            .map(|cursor| Cursor::decode(cursor, order, &list.into()))
            .transpose()?;
        let page = self
            .with_session(
                self.store_for(list)
                    .feed(list.into(), order, position.as_ref(), first),
            )
            .await?;
        let ids: Vec<Ranked> = page.entries.iter().map(|(ranked, _)| *ranked).collect();
        let full = page.has_next || ids.len() == first;
        // Each edge's cursor holds its article's position: a vote on one
        // of them changes the page.
        self.record(Deps::shows_cursors);
        let records = self
            .shown(list, order, &ids, full, position.is_none())
            .await?;
        let mut cursors: std::collections::HashMap<_, _> = page
            .entries
            .iter()
            .map(|((id, _), position)| (*id, Cursor::encode(order, &list.into(), position)))
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
        self.record(|deps| deps.article(&id.to_string()));
        self.articles.load_one(id).await
    }

    /// One article, read at once: for a resolver that knows no other read
    /// can join its batch (a subscription event), where the DataLoader's
    /// wait would only delay it.
    pub async fn article_unbatched(&self, id: ArticleId) -> Result<Option<ArticleRecord>> {
        self.record(|deps| deps.article(&id.to_string()));
        Ok(self
            .articles
            .loader()
            .load_ranked(&[(id, None)])
            .await?
            .remove(&id))
    }

    pub async fn article_by_slug(&self, slug: &str) -> Result<Option<ArticleRecord>> {
        match self.store().article_id_by_slug(slug).await? {
            Some(id) => self.article(id).await,
            None => Ok(None),
        }
    }

    /// Number of ranked articles. A post through any instance invalidates
    /// cached responses, so counts need no record.
    pub async fn article_count(&self) -> Result<u64> {
        Ok(self.reads.article_count().await?)
    }

    pub async fn group_count(&self, group: &GroupName) -> Result<u64> {
        Ok(self.store().group_count(group).await?)
    }

    /// A page of the group directory after the cursor `after`. Votes do
    /// not change it; posts and group changes drop cached pages.
    pub async fn groups(&self, first: usize, after: Option<&str>) -> Result<DirectoryPage> {
        let position = after.map(GroupCursor::decode).transpose()?;
        Ok(self.reads.groups_page(position.as_ref(), first).await?)
    }

    /// A user's karma and rank (batched); any vote may change them.
    pub async fn standing(&self, name: &str) -> Result<Option<Standing>> {
        self.record(Deps::any_vote);
        self.standings.load_one(name.to_owned()).await
    }

    /// The karma leaderboard; any vote may change it.
    pub async fn top_posters(&self, limit: usize) -> Result<Vec<(String, i64)>> {
        self.record(Deps::any_vote);
        Ok(self.reads.top_posters(limit).await?)
    }

    /// Score changes from now on, from the process' one pub/sub connection.
    pub fn score_events(&self) -> broadcast::Receiver<Arc<ScoreEvent>> {
        self.app.pubsub.subscribe()
    }

    /// Reads articles for a stream that outlives each event's resolution
    /// (new posts): as this request's caller, with their votes. Streams
    /// are never cached, so it records nothing.
    pub fn article_reader(&self) -> ArticleLoader {
        ArticleLoader::new(self.app.store.clone(), self.session.clone())
    }

    /// New posts from now on, from the same connection.
    pub fn posted_events(&self) -> broadcast::Receiver<Arc<PostedEvent>> {
        self.app.pubsub.subscribe_posts()
    }

    /// Creates an account and its first session; returns the token.
    pub async fn sign_up(&self, name: &UserName, password: &Password) -> Result<String> {
        let (store, limit) = (self.store(), self.app.rates.sign_up);
        store.sign_up_budget(self.client, limit).await?;
        let hash = self.app.hasher.hash(password).await?;
        let token = new_token();
        if !store
            .create_user(name, &hash, &token_hash(&token), self.client, limit)
            .await?
        {
            return Err(AppError::bad_input(
                "name",
                format!("the name {:?} is already taken", name.as_str()),
            )
            .into());
        }
        Ok(token)
    }

    /// Checks a name and password (counting the attempt first); returns a
    /// new session's token. Wrong and unknown names answer alike.
    pub async fn log_in(&self, name: &UserName, password: &Password) -> Result<String> {
        let store = self.store();
        store
            .login_attempt(name, self.client, self.app.login, self.app.rates.log_in)
            .await?;
        // Any case of a name logs into its account.
        let account = store.account(name).await?;
        let (name, stored) = match account {
            Some((name, hash)) => (Some(name), Some(hash)),
            None => (None, None),
        };
        if !self.app.hasher.verify(password, stored).await? {
            return Err(invalid_credentials().into());
        }
        let name = name.ok_or_else(invalid_credentials)?;
        let token = new_token();
        store.create_session(&token_hash(&token), &name).await?;
        Ok(token)
    }

    /// Revokes the request's token; false when there was no valid one.
    pub async fn log_out(&self) -> Result<bool> {
        match self.session.token() {
            Some(token) => Ok(self.store().delete_session(&token_hash(token)).await?),
            None => Ok(false),
        }
    }

    pub async fn post(
        &self,
        title: &ArticleTitle,
        link: &Link,
        groups: &[GroupName],
    ) -> Result<ArticleRecord> {
        let user = self.viewer_required().await?;
        let id = self
            .store()
            .post_article(&user, title, link, groups, self.app.rates.post)
            .await?;
        self.invalidate_all();
        self.reload(id).await
    }

    /// Sets the caller's vote. Only a vote that changed something drops
    /// cached pages, and only those it can change.
    pub async fn vote(&self, id: ArticleId, direction: VoteDirection) -> Result<ArticleRecord> {
        let user = self.viewer_required().await?;
        let changed = self
            .store()
            .vote(id, &user, direction, self.app.rates.vote)
            .await?;
        let article = self.reload(id).await?;
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
        let user = self.viewer_required().await?;
        self.store()
            .rename_slug(id, &user, slug, self.app.rates.rename_slug)
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
        let user = self.viewer_required().await?;
        self.store()
            .set_groups(id, &user, add, remove, self.app.rates.set_groups)
            .await?;
        self.invalidate_all();
        self.reload(id).await
    }

    /// Counts a view once per viewer per window. Views do not invalidate
    /// cached pages: counts seen by anonymous readers may lag by a cache
    /// entry's age.
    pub async fn view(&self, id: ArticleId) -> Result<ArticleRecord> {
        let viewer = match self.viewer().await? {
            Some(user) => Viewer::User(user),
            None => Viewer::Client(self.client),
        };
        let limits = &self.app.rates;
        self.store()
            .view_article(id, &viewer, limits.view, limits.view_window_secs)
            .await?;
        self.reload(id).await
    }

    fn invalidate_all(&self) {
        if let Some(cache) = &self.app.responses {
            cache.invalidate();
        }
    }

    /// Reads an article after a write; it can only be gone if it was
    /// deleted behind votegraph's back in between.
    async fn reload(&self, id: ArticleId) -> Result<ArticleRecord> {
        self.article(id)
            .await?
            .ok_or_else(|| crate::store::not_found(id).into())
    }
}

/// What a response showed, taken once it ran (see [`RequestContext::attach`]).
pub struct Recorded(Option<DepsCollector>, Option<Arc<Holes>>);

impl Recorded {
    pub fn take(&self) -> Option<Deps> {
        self.0
            .as_ref()
            .map(|deps| std::mem::take(&mut *deps.lock()))
    }

    /// A recorded response's holes (see [`RequestContext::recorded`]).
    pub fn holes(&self) -> Option<&Holes> {
        self.1.as_deref()
    }
}

/// What a failed logIn answers, whichever rule the credentials broke.
pub fn invalid_credentials() -> AppError {
    AppError::Unauthenticated("invalid name or password")
}

/// A page of a feed: its articles with their cursors, in order.
pub struct Feed {
    pub edges: Vec<(String, ArticleRecord)>,
    pub has_next: bool,
    pub total: u64,
}

impl<'a> From<ArticleList<'a>> for List<'a> {
    fn from(list: ArticleList<'a>) -> Self {
        match list {
            ArticleList::Site => List::Site,
            ArticleList::Group(g) => List::Group(g),
            ArticleList::User(u) => List::User(u),
        }
    }
}

/// Page entries read without scores (groups, a user's articles, newest).
fn unscored(ids: Vec<ArticleId>) -> Vec<Ranked> {
    ids.into_iter().map(|id| (id, None)).collect()
}
