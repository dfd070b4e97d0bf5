//! The GraphQL API: schema, resolvers and the request-scoped loaders.
//!
//! Resolvers are thin: they parse arguments into domain newtypes, call the
//! request's [`RequestContext`] (never the store or the response cache
//! directly) and wrap the records in output types.

mod canonical;
mod context;
pub mod documents;
pub mod limits;
mod loaders;
mod moderation;
mod mutation;
mod node;
mod order;
mod query;
pub(crate) mod shape;
pub mod shared_subscriptions;
mod subscription;
mod types;
pub(crate) mod validate;

use std::sync::Arc;
use std::time::Duration;

use async_graphql::parser::types::{ExecutableDocument, OperationType};
use async_graphql::{Executor, MergedObject, MergedSubscription, Response, Schema, SchemaBuilder};
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use limits::Checked;

pub use crate::state::AppState;
pub(crate) use context::Recording;
pub use context::{ArticleList, RequestContext};
use moderation::{ModerationMutation, ModerationQuery, ModerationSubscription};
use mutation::MutationRoot;
use query::QueryRoot;
use subscription::SubscriptionRoot;

use crate::budget::WorkBudget;
use crate::error::AppError;

pub(crate) type AppSchema = Schema<Query, Mutation, Subscription>;

/// Reads: rankings, articles, groups, users, moderation.
#[derive(MergedObject, Default)]
pub struct Query(QueryRoot, ModerationQuery);

/// Writes: accounts, posts, votes, groups, slugs, views and moderation. A
/// mutation that fails writes nothing, except with `OUTCOME_UNKNOWN`
/// (storage did not answer: it may have been applied) or `NOT_REPLICATED`
/// (it was applied). Retrying any mutation after `OUTCOME_UNKNOWN` is
/// safe: a repeated vote, group change, rename, view, logOut or moderation
/// changes nothing more, a repeated post returns the first article, and a
/// repeated signUp finds the name taken (logIn with the same password
/// tells whether it was applied).
#[derive(MergedObject, Default)]
pub struct Mutation(MutationRoot, ModerationMutation);

/// Live updates over WebSocket (`graphql-transport-ws` or `graphql-ws`).
#[derive(MergedSubscription, Default)]
pub struct Subscription(SubscriptionRoot, ModerationSubscription);

/// Deeper documents are rejected before execution; GraphiQL's introspection
/// query needs 13 levels.
const MAX_DEPTH: usize = 20;

/// The API over the process' state. The schema itself carries no data:
/// each request gets a [`RequestContext`] holding the [`AppState`], so the
/// state is registered once, here, for HTTP, WebSocket and resolvers alike.
pub fn build_api(
    state: Arc<AppState>,
    guard: limits::Guard,
    deadline: Duration,
    budget: WorkBudget,
) -> Api {
    let schema = builder().finish();
    Api {
        schema,
        state,
        guard: Arc::new(guard),
        deadline,
        budget,
    }
}

/// The SDL of the schema, as committed in `schema.graphql`.
pub fn sdl() -> String {
    builder().finish().sdl()
}

/// The schema with its depth limit, before any extension.
fn builder() -> SchemaBuilder<Query, Mutation, Subscription> {
    Schema::build(
        Query::default(),
        Mutation::default(),
        Subscription::default(),
    )
    .limit_depth(MAX_DEPTH)
}

/// The schema as the transports run it: every request passes the document
/// limits and runs under the deadline, and every error gets its
/// `extensions.code` here. Not an async-graphql extension: registering any
/// sends every field through the executor's slow path.
#[derive(Clone)]
pub struct Api {
    schema: AppSchema,
    /// What every request shares (store, caches, event hub, limits).
    pub state: Arc<AppState>,
    pub guard: Arc<limits::Guard>,
    deadline: Duration,
    /// Admits every query and mutation: the pipeline's, until the body is
    /// written, and the executor's over a WebSocket.
    pub budget: WorkBudget,
}

impl Api {
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Runs a request that passed [`limits::Guard::check`], with what the
    /// check found, under the deadline. The parsed document is cloned only
    /// here, on the way to execution.
    pub(crate) async fn execute_checked(
        &self,
        mut request: async_graphql::Request,
        checked: Option<Checked>,
    ) -> Response {
        let Some(checked) = checked else {
            return self.run(request, None).await;
        };
        request.set_parsed_query(checked.document.as_ref().clone());
        let ordering = Ordering::of(&request, checked.document);
        let mut response = self.run(request, Some(checked.operation)).await;
        ordering.apply(&mut response);
        response
    }

    async fn run(
        &self,
        request: async_graphql::Request,
        operation: Option<OperationType>,
    ) -> Response {
        match tokio::time::timeout(self.deadline, self.schema.execute(request)).await {
            Ok(response) => with_codes(response),
            Err(_) => timed_out(self.deadline, operation),
        }
    }
}

/// What putting a response's keys in document order needs (see
/// [`order`]), kept from the request that execution consumes.
struct Ordering {
    document: Arc<ExecutableDocument>,
    operation_name: Option<String>,
    variables: async_graphql::Variables,
}

impl Ordering {
    fn of(request: &async_graphql::Request, document: Arc<ExecutableDocument>) -> Self {
        Self {
            document,
            operation_name: request.operation_name.clone(),
            variables: request.variables.clone(),
        }
    }

    fn apply(&self, response: &mut Response) {
        if let Some((_, operation)) =
            limits::select_operation(&self.document, self.operation_name.as_deref())
        {
            order::in_document_order(
                &mut response.data,
                &self.document,
                &operation.node,
                &self.variables,
            );
        }
    }
}

/// A response refusing a request before it ran.
pub fn rejection(error: AppError) -> Response {
    Response::from_errors(vec![error.into_server_error()])
}

/// The response of a request stopped at its execution deadline: a
/// mutation may have written by then.
fn timed_out(deadline: Duration, operation: Option<OperationType>) -> Response {
    let ms = deadline.as_millis() as u64;
    rejection(match operation {
        Some(OperationType::Mutation) => AppError::OutcomeUnknown {
            cause: format!("a mutation ran past the {ms} ms deadline"),
        },
        _ => AppError::Timeout { ms },
    })
}

impl Executor for Api {
    async fn execute(&self, request: async_graphql::Request) -> Response {
        let admitted = async {
            let checked = self.guard.check(&request)?;
            let permit = self.budget.admit(checked.as_ref().map_or(0, |c| c.cost));
            Ok::<_, AppError>((checked, permit.await?))
        };
        match admitted.await {
            Ok((checked, _permit)) => self.execute_checked(request, checked).await,
            Err(e) => rejection(e),
        }
    }

    /// Subscriptions are long-lived: the limits apply to them, the
    /// deadline only to queries and mutations.
    fn execute_stream(
        &self,
        mut request: async_graphql::Request,
        session_data: Option<Arc<async_graphql::Data>>,
    ) -> BoxStream<'static, Response> {
        let (ordering, operation, cost) = match self.guard.check(&request) {
            Ok(Some(checked)) => {
                request.set_parsed_query(checked.document.as_ref().clone());
                (
                    Some(Ordering::of(&request, checked.document)),
                    Some(checked.operation),
                    checked.cost,
                )
            }
            Ok(None) => (None, None, 0),
            Err(e) => return futures_util::stream::once(async move { rejection(e) }).boxed(),
        };
        let stream = self
            .schema
            .execute_stream_with_session_data(request, session_data.unwrap_or_default())
            .map(move |response| {
                let mut response = with_codes(response);
                if let Some(ordering) = &ordering {
                    ordering.apply(&mut response);
                }
                response
            });
        if operation == Some(OperationType::Subscription) {
            return stream.boxed();
        }
        let deadline = self.deadline;
        let budget = self.budget.clone();
        futures_util::stream::once(async move {
            let _permit = match budget.admit(cost).await {
                Ok(permit) => permit,
                Err(e) => return rejection(e),
            };
            let mut stream = std::pin::pin!(stream);
            match tokio::time::timeout(deadline, stream.next()).await {
                Ok(Some(response)) => response,
                Ok(None) => rejection(AppError::Internal(
                    "an operation ended without a response".to_owned(),
                )),
                Err(_) => timed_out(deadline, operation),
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
