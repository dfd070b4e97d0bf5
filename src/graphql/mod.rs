//! The GraphQL API: schema, resolvers and the request-scoped loaders.
//!
//! Resolvers are thin: they parse arguments into domain newtypes, call the
//! [`Store`](crate::store::Store) and wrap the records in output types.

pub mod limits;
mod loaders;
mod mutation;
mod query;
pub mod shared;
mod subscription;
mod types;

use async_graphql::dataloader::DataLoader;
use std::sync::Arc;
use std::time::Duration;

use async_graphql::parser::types::OperationType;
use async_graphql::{Context, Executor, Response, Schema};
use futures_util::stream::BoxStream;
use futures_util::StreamExt;

pub use loaders::{ArticleLoader, StandingLoader};
pub use mutation::MutationRoot;
pub use query::QueryRoot;
pub use subscription::{ScoreChange, SubscriptionRoot};
pub use types::{Article, ArticleOrder, DateTime, Group, RankedUser, User, VoteDirection};

use crate::auth::{PasswordHasher, Session};
use crate::cache::{DepsCollector, ResponseCache};
use crate::client::ClientAddr;
use crate::config::RateLimits;
use crate::error::AppError;
use crate::pubsub::PubSub;
use crate::store::{LoginLimit, Store};

pub type AppSchema = Schema<QueryRoot, MutationRoot, SubscriptionRoot>;

/// Deeper documents are rejected before execution; GraphiQL's introspection
/// query needs 13 levels.
const MAX_DEPTH: usize = 20;

/// Whether article lists are loaded in one batch (always, but for the
/// benchmark's N+1 comparison).
#[derive(Clone, Copy, Debug)]
pub struct Batching(pub bool);

/// The schema with its process-wide data (store, hasher, event hub, the
/// response cache its mutations invalidate, the write limits).
pub fn build_schema(
    store: Store,
    hasher: PasswordHasher,
    pubsub: PubSub,
    batching: Batching,
    cache: Option<Arc<ResponseCache>>,
    limits: Limits,
) -> Api {
    let schema = Schema::build(QueryRoot, MutationRoot, SubscriptionRoot)
        .data(store)
        .data(hasher)
        .data(pubsub)
        .data(batching)
        .data(cache)
        .data(limits.login)
        .data(limits.rates)
        .limit_depth(MAX_DEPTH)
        .finish();
    Api {
        schema,
        guard: Arc::new(limits.guard),
        deadline: limits.deadline,
    }
}

/// What a request must pass to run (the document limits), how long it may
/// run, and how often a client may write.
pub struct Limits {
    pub guard: limits::Guard,
    pub deadline: Duration,
    pub login: LoginLimit,
    pub rates: RateLimits,
}

/// The SDL of the schema, as committed in `schema.graphql`.
pub fn sdl() -> String {
    Schema::build(QueryRoot, MutationRoot, SubscriptionRoot)
        .finish()
        .sdl()
}

/// Data one request carries: its caller (session and address) and its own
/// loaders, so batching never mixes requests and nothing is cached between
/// them.
pub fn request_data(store: &Store, session: Session, client: ClientAddr) -> RequestData {
    data_with_deps(store, session, client, None)
}

/// Request data that records what the response shows (see
/// [`Deps`](crate::cache::Deps)), for responses that may be cached. Only
/// for one request: a connection's record would grow without end.
pub fn recorded_request_data(store: &Store, session: Session, client: ClientAddr) -> RequestData {
    data_with_deps(store, session, client, Some(DepsCollector::default()))
}

fn data_with_deps(
    store: &Store,
    session: Session,
    client: ClientAddr,
    deps: Option<DepsCollector>,
) -> RequestData {
    let session = Arc::new(session);
    RequestData {
        articles: DataLoader::new(
            ArticleLoader::new(store.clone(), session.clone(), deps.clone()),
            tokio::spawn,
        ),
        standings: DataLoader::new(StandingLoader::new(store.clone()), tokio::spawn),
        session,
        client,
        deps,
    }
}

pub struct RequestData {
    pub session: Arc<Session>,
    /// Where the request came from, for per-address rate limits (see
    /// [`crate::client`]); for a WebSocket, the upgrade request's address.
    pub client: ClientAddr,
    /// What the response shows that votes can change (for the response cache).
    pub deps: Option<DepsCollector>,
    pub articles: DataLoader<ArticleLoader>,
    pub standings: DataLoader<StandingLoader>,
}

impl RequestData {
    /// Attaches the data to a GraphQL request.
    pub fn attach(self, request: async_graphql::Request) -> async_graphql::Request {
        request
            .data(self.session)
            .data(self.client)
            .data(self.articles)
            .data(self.standings)
            .data(self.deps)
    }

    /// The same data for a WebSocket connection.
    pub fn into_connection_data(self) -> async_graphql::Data {
        let mut data = async_graphql::Data::default();
        data.insert(self.session);
        data.insert(self.client);
        data.insert(self.articles);
        data.insert(self.standings);
        data
    }
}

/// Drops cached anonymous responses after a write through this instance.
pub(crate) fn invalidate_cache(ctx: &Context<'_>) {
    if let Some(Some(cache)) = ctx.data_opt::<Option<Arc<ResponseCache>>>() {
        cache.invalidate();
    }
}

/// Records what the response shows, for the response cache.
pub(crate) fn record_deps(ctx: &Context<'_>, f: impl FnOnce(&mut crate::cache::Deps)) {
    if let Some(Some(deps)) = ctx.data_opt::<Option<DepsCollector>>() {
        f(&mut deps.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

/// Drops the cached responses a vote through this instance can change,
/// before the mutation answers.
pub(crate) fn invalidate_for_vote(ctx: &Context<'_>, article: &crate::store::ArticleRecord) {
    if let Some(Some(cache)) = ctx.data_opt::<Option<Arc<ResponseCache>>>() {
        cache.vote(Arc::new(crate::pubsub::ScoreEvent {
            id: article.id.to_string(),
            score: article.score,
            votes: article.votes,
            downvotes: article.downvotes,
            at: 0.0,
            groups: article.groups.clone(),
        }));
    }
}

pub(crate) fn store<'a>(ctx: &Context<'a>) -> &'a Store {
    ctx.data_unchecked::<Store>()
}

pub(crate) fn session<'a>(ctx: &Context<'a>) -> &'a Session {
    ctx.data_unchecked::<Arc<Session>>()
}

pub(crate) fn client_addr(ctx: &Context<'_>) -> ClientAddr {
    *ctx.data_unchecked::<ClientAddr>()
}

pub(crate) fn rate_limits<'a>(ctx: &Context<'a>) -> &'a RateLimits {
    ctx.data_unchecked::<RateLimits>()
}

pub(crate) fn standings<'a>(ctx: &Context<'a>) -> &'a DataLoader<StandingLoader> {
    ctx.data_unchecked::<DataLoader<StandingLoader>>()
}

pub(crate) fn loader<'a>(ctx: &Context<'a>) -> &'a DataLoader<ArticleLoader> {
    ctx.data_unchecked::<DataLoader<ArticleLoader>>()
}

/// The schema as the transports run it: every request passes the document
/// limits ([`limits::Guard`]) and runs under the execution deadline, and
/// every error of every response, over HTTP or WebSocket, gets its
/// `extensions.code` here.
///
/// This is an [`Executor`] wrapper rather than an async-graphql extension
/// because registering any extension sends every field through the
/// executor's slow path (a registry lookup and an extension chain per
/// field): the uncached front page runs about 15 % faster without it.
#[derive(Clone)]
pub struct Api {
    schema: AppSchema,
    guard: Arc<limits::Guard>,
    deadline: Duration,
}

impl Api {
    /// The document limits, for transports that check a request before
    /// deciding how to serve it (the HTTP path's response cache).
    pub fn guard(&self) -> &limits::Guard {
        &self.guard
    }

    /// How long one query or mutation may run.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Runs a request that already passed [`limits::Guard::check`], with
    /// its parsed document set, under the deadline.
    pub async fn execute_checked(&self, request: async_graphql::Request) -> Response {
        match tokio::time::timeout(self.deadline, self.schema.execute(request)).await {
            Ok(response) => with_codes(response),
            Err(_) => timed_out(self.deadline),
        }
    }

    /// Checks a request: on success its parsed document is set and its
    /// operation type comes back (None when it does not parse or cannot be
    /// selected: async-graphql then reports that itself).
    fn admit(
        &self,
        request: &mut async_graphql::Request,
    ) -> Result<Option<OperationType>, Box<Response>> {
        match self.guard.check(request) {
            Ok(Some(checked)) => {
                request.set_parsed_query(checked.document.as_ref().clone());
                Ok(Some(checked.operation))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(Box::new(rejection(e))),
        }
    }
}

/// A response refusing a request before it ran.
pub fn rejection(error: AppError) -> Response {
    Response::from_errors(vec![error.to_server_error()])
}

/// The response of a request stopped at its execution deadline.
fn timed_out(deadline: Duration) -> Response {
    rejection(AppError::Timeout {
        ms: deadline.as_millis() as u64,
    })
}

impl Executor for Api {
    async fn execute(&self, mut request: async_graphql::Request) -> Response {
        if let Err(response) = self.admit(&mut request) {
            return *response;
        }
        self.execute_checked(request).await
    }

    /// Subscriptions are long-lived, so the deadline does not apply to
    /// them; the limits do. A query or mutation sent over a WebSocket gets
    /// the deadline like one sent over HTTP.
    fn execute_stream(
        &self,
        mut request: async_graphql::Request,
        session_data: Option<Arc<async_graphql::Data>>,
    ) -> BoxStream<'static, Response> {
        let operation = match self.admit(&mut request) {
            Ok(operation) => operation,
            Err(response) => return futures_util::stream::once(async move { *response }).boxed(),
        };
        let stream = self
            .schema
            .execute_stream_with_session_data(request, session_data.unwrap_or_default())
            .map(with_codes);
        if operation == Some(OperationType::Subscription) {
            return stream.boxed();
        }
        let deadline = self.deadline;
        futures_util::stream::once(async move {
            let mut stream = std::pin::pin!(stream);
            match tokio::time::timeout(deadline, stream.next()).await {
                Ok(Some(response)) => response,
                Ok(None) => rejection(AppError::Internal(
                    "an operation ended without a response".to_owned(),
                )),
                Err(_) => timed_out(deadline),
            }
        })
        .boxed()
    }
}

fn with_codes(mut response: Response) -> Response {
    response
        .errors
        .iter_mut()
        .for_each(crate::error::assign_code);
    response
}
