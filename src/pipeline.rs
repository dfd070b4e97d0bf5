//! The request pipeline: one GraphQL query or mutation, from its parsed
//! form to its answer, the same for every transport. HTTP hands it what it
//! read from a URL or a body; a WebSocket what a `subscribe` message
//! carried; each turns the [`PipelineResponse`] into its own wire format.
//!
//! In order: automatic persisted queries, the document limits, the
//! transport's own rule (a GET runs queries only), the registration of a
//! new persisted document, the anonymous response cache (with single
//! flight), the work budget, logged-in pages from shared templates, then
//! the execution itself (on the read replica for anonymous queries).

use std::sync::Arc;

use async_graphql::parser::types::{ExecutableDocument, OperationType};
use async_graphql::Name;

use crate::auth::Session;
use crate::budget::Permit;
use crate::cache::{Cached, ResponseCache};
use crate::client_addr::ClientAddr;
use crate::error::{AppError, ErrorCode};
use crate::graphql::limits::operation_name;
use crate::graphql::{Api, RequestContext};

/// One request, as a transport read it.
pub struct PipelineRequest {
    pub request: async_graphql::Request,
    /// `Authorization` (`Bearer <token>`), if any.
    pub authorization: Option<String>,
    /// Who sent it, for rate limits.
    pub client: ClientAddr,
    /// A GET: only queries may run (a link prefetcher must not vote).
    pub queries_only: bool,
    /// `extensions.cost` asked for; such an answer is never cached.
    pub with_cost: bool,
}

/// What the pipeline answers.
pub struct PipelineResponse {
    /// The operation that ran or was chosen, for logs and metrics.
    pub operation: Option<(OperationType, Option<Name>)>,
    /// The first error's code, when an error was refused or returned.
    pub code: Option<&'static str>,
    pub outcome: ResponseContent,
}

pub enum ResponseContent {
    /// Refused before it ran; nothing was written.
    Refused(AppError),
    /// Failed before execution (parse, validation, variables): errors and
    /// no data.
    RequestError(async_graphql::Response),
    /// A JSON body.
    Body {
        body: Arc<Cached>,
        /// The cache entry it was served from or stored as (for its
        /// compressed forms).
        cached: Option<(Arc<ResponseCache>, String)>,
        /// An anonymous query's: the same for anyone who asks.
        anonymous: bool,
        /// The work budget's units, held until the body is written.
        permit: Option<Permit>,
    },
}

impl PipelineResponse {
    fn refused(operation: Option<(OperationType, Option<Name>)>, e: AppError) -> Self {
        Self {
            operation,
            code: Some(e.code().as_str()),
            outcome: ResponseContent::Refused(e),
        }
    }
}

/// Runs `ask` through the pipeline.
pub async fn run(api: &Api, ask: PipelineRequest) -> PipelineResponse {
    let PipelineRequest {
        mut request,
        authorization,
        client,
        queries_only,
        with_cost,
    } = ask;
    let registration = match api.state().persisted().resolve(&mut request).await {
        Ok(registration) => registration,
        Err(e) => return PipelineResponse::refused(None, e),
    };
    let checked = match api.guard().check(&request) {
        Ok(checked) => checked,
        Err(e) => return PipelineResponse::refused(None, e),
    };
    let (kind, cost) = match &checked {
        Some(c) => (Some(c.operation), c.cost),
        None => (None, 0),
    };
    let operation = checked.as_ref().map(|c| {
        let name = operation_name(&c.document, request.operation_name.as_deref());
        (c.operation, name)
    });
    if queries_only && kind.is_some_and(|op| op != OperationType::Query) {
        return PipelineResponse::refused(operation, AppError::MethodNotAllowed);
    }
    if let Some(registration) = registration {
        // Only a document that passed every limit is kept.
        let registered = api
            .state()
            .persisted()
            .register(registration, &request.query, client)
            .await;
        if let Err(e) = registered {
            return PipelineResponse::refused(operation, e);
        }
    }
    let auth = authorization.as_deref();
    let query = kind == Some(OperationType::Query) && !with_cost;
    let anonymous = auth.is_none() && query;
    // Anonymous queries may be answered from (and stored in) the cache.
    let mut stored = None;
    if let Some(cache) = api.state().responses().filter(|_| anonymous) {
        let key = cache_key(&request);
        let computation = match cache.lookup(&key, api.deadline()).await {
            Ok(body) => {
                return PipelineResponse {
                    operation,
                    code: None,
                    outcome: ResponseContent::Body {
                        body,
                        cached: Some((cache.clone(), key)),
                        anonymous,
                        permit: None,
                    },
                }
            }
            Err(computation) => computation,
        };
        stored = Some((cache, key, cache.position(), computation));
    }
    // Past the cache, the request runs (or fills a template): it needs
    // room in the work budget, held until its body is written.
    let permit = match api.budget().admit(cost).await {
        Ok(permit) => permit,
        Err(e) => return PipelineResponse::refused(operation, e),
    };
    let personal = auth.is_some() && query;
    if let (true, Some(cache), Some(checked)) = (personal, api.state().responses(), &checked) {
        let document = checked.document.clone();
        if let Some(body) = personal_page(api, cache, client, auth, &request, document).await {
            return PipelineResponse {
                operation,
                code: None,
                outcome: ResponseContent::Body {
                    body: Arc::new(Cached::new(body)),
                    cached: None,
                    anonymous,
                    permit: Some(permit),
                },
            };
        }
    }
    let session = Session::from_authorization(auth);
    let context = match stored {
        Some(_) => RequestContext::recorded(api.state(), client),
        None => RequestContext::new(api.state(), session, client),
    };
    // An anonymous query may read the replica; anything else, the primary.
    let context = if auth.is_none() && kind == Some(OperationType::Query) {
        context.on_replica()
    } else {
        context
    };
    let (request, recorded) = context.attach(request);
    let mut response = api
        .execute_checked(request, checked.map(|c| c.document))
        .await;
    let code = first_code(&response);
    if with_cost && kind.is_some() {
        response.extensions.insert(
            "cost".to_owned(),
            async_graphql::Value::from_json(serde_json::json!({
                "requested": cost,
                "limit": api.guard().limits().max_cost,
            }))
            .unwrap_or_default(),
        );
    }
    if is_request_error(&response) {
        return PipelineResponse {
            operation,
            code,
            outcome: ResponseContent::RequestError(response),
        };
    }
    let ok = response.is_ok();
    // A response to cache is kept as a template, so votes can patch it;
    // one that shows who the caller is (nobody: it is anonymous) is kept
    // as it is.
    let template = match (ok, &stored, recorded.holes()) {
        (true, Some(_), Some(holes)) if !holes.is_personal() => holes.template(&mut response),
        _ => None,
    };
    let body = Arc::new(match template {
        Some(template) => Cached::template(template),
        None if ok => Cached::new(json_body(&response, cost)),
        None => Cached::failed(json_body(&response, cost)),
    });
    let cached = match stored {
        Some((cache, key, start, computation)) => {
            if let (true, Some(deps)) = (ok, recorded.take()) {
                cache.put(key.clone(), start, deps, body.clone());
            }
            if let Some(computation) = computation {
                computation.publish(body.clone());
            }
            Some((cache.clone(), key))
        }
        None => None,
    };
    PipelineResponse {
        operation,
        code,
        outcome: ResponseContent::Body {
            body,
            cached,
            anonymous,
            permit: Some(permit),
        },
    }
}

/// The code of `response`'s first error, if it has one and it is one of
/// votegraph's (else `OTHER`).
fn first_code(response: &async_graphql::Response) -> Option<&'static str> {
    let error = response.errors.first()?;
    let code = error.extensions.as_ref().and_then(|ext| ext.get("code"));
    Some(match code {
        Some(async_graphql::Value::String(code)) => {
            ErrorCode::parse(code).map_or("OTHER", ErrorCode::as_str)
        }
        _ => "OTHER",
    })
}

/// Bytes of JSON a response takes per unit of query cost, about: a page
/// of 100 articles with every field (cost 200) is ~26 KB.
const BYTES_PER_COST: u64 = 128;

/// `response` as JSON, written once into a buffer sized from its query's
/// cost (not grown by doubling and copying), and trimmed when the guess
/// was long: a cached body holds no spare capacity the cache's byte count
/// would not see.
fn json_body(response: &async_graphql::Response, cost: u64) -> bytes::Bytes {
    let guess = (cost.saturating_add(8) * BYTES_PER_COST).min(4 << 20) as usize;
    let mut body = Vec::with_capacity(guess);
    if let Err(e) = serde_json::to_writer(&mut body, response) {
        tracing::error!(error = %e, "serialising a response");
        body.clear();
    }
    if body.capacity() > body.len() + body.len() / 4 {
        body.shrink_to_fit();
    }
    bytes::Bytes::from(body)
}

/// A logged-in query's body, from its template (see `templates.rs`):
/// the caller's session is looked up while the template is found (or
/// computed), then their votes on its articles fill it. None when the
/// query must run whole: it reads who the caller is, it failed, or Redis
/// did (the whole run then reports that properly).
async fn personal_page(
    api: &Api,
    cache: &Arc<ResponseCache>,
    client: ClientAddr,
    auth: Option<&str>,
    request: &async_graphql::Request,
    document: Arc<ExecutableDocument>,
) -> Option<bytes::Bytes> {
    let key = format!("\u{1}{}", cache_key(request));
    let session = Session::from_authorization(auth);
    let store = api.state().store();
    let (cached, viewer) = futures_util::join!(
        template(api, cache, &key, client, request, document),
        session.user(store)
    );
    let cached = cached?;
    let template = cached.as_template()?;
    match viewer.ok()? {
        // An unknown or expired token reads as anonymous, as everywhere.
        None => Some(template.anonymous()),
        Some(user) => {
            let votes = store.my_votes(&user, &template.ids()).await.ok()?;
            Some(template.fill(&votes))
        }
    }
}

/// The cache entry of a logged-in query under `key`: a template, or the
/// mark that it runs whole. Concurrent misses compute it once.
async fn template(
    api: &Api,
    cache: &Arc<ResponseCache>,
    key: &str,
    client: ClientAddr,
    request: &async_graphql::Request,
    document: Arc<ExecutableDocument>,
) -> Option<Arc<Cached>> {
    let computation = match cache.lookup(key, api.deadline()).await {
        Ok(cached) => return Some(cached),
        // A leader that gave up: the request runs whole.
        Err(None) => return None,
        Err(Some(computation)) => computation,
    };
    let start = cache.position();
    let mut copy =
        async_graphql::Request::new(request.query.clone()).variables(request.variables.clone());
    copy.operation_name = request.operation_name.clone();
    let (copy, recorded) = RequestContext::recorded(api.state(), client).attach(copy);
    let mut response = api.execute_checked(copy, Some(document)).await;
    let holes = recorded.holes()?;
    let cached = if holes.is_personal() {
        Cached::not_templatable()
    } else if response.is_ok() {
        Cached::template(holes.template(&mut response)?)
    } else {
        return None;
    };
    let cached = Arc::new(cached);
    if let Some(deps) = recorded.take() {
        cache.put(key.to_owned(), start, deps, cached.clone());
    }
    computation.publish(cached.clone());
    Some(cached)
}

/// Whether `response` failed before execution: nothing but parse,
/// validation or variable errors, none inside a field, and no data. The
/// GraphQL spec then wants no `data` key at all.
fn is_request_error(response: &async_graphql::Response) -> bool {
    response.data == async_graphql::Value::Null
        && !response.errors.is_empty()
        && response.errors.iter().all(|e| {
            let code = e.extensions.as_ref().and_then(|x| x.get("code"));
            let before_execution = matches!(
                code,
                Some(async_graphql::Value::String(c))
                    if matches!(c.as_str(), "GRAPHQL_PARSE_FAILED" | "GRAPHQL_VALIDATION_FAILED" | "BAD_USER_INPUT")
            );
            e.path.is_empty() && before_execution
        })
}

fn cache_key(request: &async_graphql::Request) -> String {
    format!(
        "{}\u{0}{}\u{0}{}",
        request.query,
        request.operation_name.as_deref().unwrap_or(""),
        serde_json::to_string(&request.variables).unwrap_or_default()
    )
}
