//! The one door resolvers go through. Anonymous responses are cached whole,
//! which is only correct if the cache learns everything a response shows
//! and every write drops what it changes; so every read here records what
//! it returns, and every write invalidates what it changes. Resolvers never
//! see the store or the cache, so a new one cannot get this wrong.

use std::sync::Arc;

use async_graphql::{Context, Result};

use crate::auth::Session;
use crate::client_addr::ClientAddr;
use crate::domain::VoteDirection;
use crate::error::AppError;
use crate::state::AppState;
use crate::store::{ArticleRecord, Caller};

mod accounts;
mod moderation;
mod reads;
mod recording;
mod routing;
mod writes;

pub use crate::store::List as ArticleList;
pub(crate) use accounts::invalid_credentials;
pub use accounts::Accounts;
pub(crate) use recording::Recording;
use routing::Routing;

/// One request's view of the application: its caller, its own loaders (so
/// batching never mixes requests and nothing is cached between them), and,
/// when its response may be cached, the record of what it shows.
pub struct RequestContext {
    app: Arc<AppState>,
    routing: Routing,
    session: Arc<Session>,
    client: ClientAddr,
    recording: Recording,
}

impl RequestContext {
    /// The context of a request whose response is not cached.
    pub fn new(app: &Arc<AppState>, session: Session, client: ClientAddr) -> Self {
        let session = Arc::new(session);
        Self {
            routing: Routing::new(&app.store, &app.store, &session),
            app: app.clone(),
            session,
            client,
            recording: Recording::default(),
        }
    }

    /// The context of an anonymous request (or template) whose response
    /// may be cached: it records what the response shows, and where each
    /// `myVote` goes. Only for one request: a connection's record would
    /// grow without end.
    pub fn recorded(app: &Arc<AppState>, client: ClientAddr) -> Self {
        Self {
            recording: Recording::kept(),
            ..Self::new(app, Session::from_authorization(None), client)
        }
    }

    /// Sends this request's reads of the site's rankings, articles and
    /// karma to the read replica, while its link to the primary is up. Only
    /// for anonymous HTTP queries: logged-in readers see their own writes,
    /// and subscriptions' events come from the primary. Group and user
    /// rankings stay on the primary: building a cached one writes.
    pub(crate) fn on_replica(mut self) -> Self {
        let usable = self.app.replica_lag.link_up();
        if let (Some(replica), None, true) = (&self.app.replica, self.session.token(), usable) {
            self.routing = Routing::new(&self.app.store, replica, &self.session);
        }
        self
    }

    /// The context a resolver runs in.
    pub(crate) fn of<'a>(ctx: &Context<'a>) -> Result<&'a Self> {
        ctx.data::<Self>()
            .map_err(|_| AppError::Internal("a request ran without its context".to_owned()).into())
    }

    /// Attaches the context to a GraphQL request; the handle it returns
    /// gives what the response showed, once it ran.
    pub(crate) fn attach(
        self,
        request: async_graphql::Request,
    ) -> (async_graphql::Request, Recording) {
        let recorded = self.recording.clone();
        (request.data(self), recorded)
    }

    /// The context of every operation of one WebSocket connection.
    pub fn into_connection_data(self) -> async_graphql::Data {
        let mut data = async_graphql::Data::default();
        data.insert(self);
        data
    }

    /// Signing up, logging in and out, as this request's caller.
    pub fn accounts(&self) -> Accounts<'_> {
        Accounts {
            app: &self.app,
            session: &self.session,
            client: self.client,
        }
    }

    /// The logged-in user and their role, looked up once per request.
    pub async fn caller(&self) -> Result<Option<Caller>> {
        self.recording.shows_caller();
        Ok(self.session.caller(&self.routing.primary).await?)
    }

    /// The logged-in user and their role, or `BANNED` or `UNAUTHENTICATED`:
    /// resolvers ask first, so an anonymous caller hears of it before any
    /// complaint about input.
    pub(crate) async fn caller_required(&self) -> Result<Caller> {
        self.recording.shows_caller();
        Ok(self.session.require_caller(&self.routing.primary).await?)
    }

    /// The caller's vote on `article`. A template leaves a hole there,
    /// filled per reader.
    pub fn my_vote(&self, ctx: &Context<'_>, article: &ArticleRecord) -> Option<VoteDirection> {
        self.recording.my_vote(ctx, article)
    }
}

/// A page of a feed: its articles with their cursors, in order.
pub(crate) struct Feed {
    pub edges: Vec<(String, ArticleRecord)>,
    pub has_next: bool,
    pub total: u64,
}
