//! The request pipeline: one GraphQL query or mutation from its parsed form
//! to its answer, the same for HTTP and WebSocket. In order: persisted
//! queries, the document limits, the transport's rule (GET runs queries
//! only), a new persisted document's registration, the response cache (with
//! single flight), the work budget, logged-in pages from templates, then
//! execution (on the read replica for anonymous queries).

use std::sync::Arc;

use async_graphql::parser::types::OperationType;
use async_graphql::Name;

use crate::auth::{token_hash, Session};
use crate::budget::Permit;
use crate::cache::{Cached, Computation, Position, ResponseCache};
use crate::client_addr::ClientAddr;
use crate::error::{AppError, ErrorCode};
use crate::graphql::limits::Checked;
use crate::graphql::{Api, Recording, RequestContext};
use crate::store::SessionUser;

/// One request, as a transport read it.
pub struct PipelineRequest {
    pub request: async_graphql::Request,
    /// The `documentId` it names its document by, if any.
    pub document_id: Option<String>,
    /// `Authorization` (`Bearer <token>`), if any.
    pub authorization: Option<String>,
    /// Who sent it, for rate limits.
    pub client: ClientAddr,
    /// A GET: only queries may run (a link prefetcher must not vote).
    pub queries_only: bool,
    /// `extensions.cost` asked for; such an answer is never cached.
    pub with_cost: bool,
}

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
    /// Failed before execution (parse, validation, variables): no data.
    RequestError(async_graphql::Response),
    /// A JSON body.
    Body {
        body: Arc<Cached>,
        /// Its cache entry, which keeps its compressed forms.
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

    fn body(
        operation: Option<(OperationType, Option<Name>)>,
        code: Option<&'static str>,
        body: Arc<Cached>,
        cached: Option<(Arc<ResponseCache>, String)>,
        anonymous: bool,
        permit: Option<Permit>,
    ) -> Self {
        Self {
            operation,
            code,
            outcome: ResponseContent::Body {
                body,
                cached,
                anonymous,
                permit,
            },
        }
    }
}

pub async fn run(api: &Api, request: PipelineRequest) -> PipelineResponse {
    let admitted = match admit(api, request).await {
        Ok(admitted) => admitted,
        Err(refused) => return refused,
    };
    let storing = match look_up_cache(api, &admitted).await {
        Ok(storing) => storing,
        Err(hit) => return hit,
    };
    // Past the cache, the request runs (or fills a template): it needs
    // room in the work budget, held until its body is written.
    let permit = match api.budget.admit(admitted.cost()).await {
        Ok(permit) => permit,
        Err(e) => return PipelineResponse::refused(admitted.operation, e),
    };
    if let Some(body) = logged_in_page(api, &admitted).await {
        let (body, anonymous) = (Arc::new(Cached::new(body)), admitted.anonymous());
        let operation = admitted.operation;
        return PipelineResponse::body(operation, None, body, None, anonymous, Some(permit));
    }
    execute(api, admitted, storing, permit).await
}

/// A request that passed every check before anything runs.
struct Admitted {
    ask: PipelineRequest,
    /// The parsed document, its operation and its cost; None when it did
    /// not parse or validate (execution then reports why).
    checked: Option<Checked>,
    operation: Option<(OperationType, Option<Name>)>,
}

impl Admitted {
    fn cost(&self) -> u64 {
        self.checked.as_ref().map_or(0, |c| c.cost)
    }

    fn is_query(&self) -> bool {
        let query = |c: &Checked| c.operation == OperationType::Query;
        self.checked.as_ref().is_some_and(query)
    }

    /// A query whose answer is the same for anyone who asks it (no
    /// caller, no cost report): the response cache may hold it.
    fn anonymous(&self) -> bool {
        self.ask.authorization.is_none() && self.is_query() && !self.ask.with_cost
    }

    /// A logged-in query that may be filled from its shared template.
    fn logged_in_query(&self) -> bool {
        self.ask.authorization.is_some() && self.is_query() && !self.ask.with_cost
    }
}

/// Everything that may refuse a request before it touches the cache.
async fn admit(api: &Api, mut ask: PipelineRequest) -> Result<Admitted, PipelineResponse> {
    let persisted = &api.state.persisted;
    let registration = persisted
        .resolve(&mut ask.request, ask.document_id.as_deref())
        .await
        .map_err(|e| PipelineResponse::refused(None, e))?;
    let checked = api
        .guard
        .check(&ask.request)
        .map_err(|e| PipelineResponse::refused(None, e))?;
    let operation = checked.as_ref().map(|c| (c.operation, c.name.clone()));
    let not_a_query = checked
        .as_ref()
        .is_some_and(|c| c.operation != OperationType::Query);
    if ask.queries_only && not_a_query {
        return Err(PipelineResponse::refused(
            operation,
            AppError::MethodNotAllowed,
        ));
    }
    if let Some(registration) = registration {
        // Only a document that passed every limit is kept.
        let registered = persisted
            .register(registration, &ask.request.query, ask.client)
            .await;
        if let Err(e) = registered {
            return Err(PipelineResponse::refused(operation, e));
        }
    }
    Ok(Admitted {
        ask,
        checked,
        operation,
    })
}

/// Where an anonymous query's response goes once computed, and the
/// single flight that waits for it (None when computed alone).
struct Storing {
    cache: Arc<ResponseCache>,
    key: String,
    start: Position,
    computation: Option<Computation>,
}

/// An anonymous query's cache lookup: `Err` with the answer on a hit;
/// else where its response is to be stored (None: not cacheable).
async fn look_up_cache(
    api: &Api,
    admitted: &Admitted,
) -> Result<Option<Storing>, PipelineResponse> {
    let cache = api.state.responses.as_ref();
    let Some(cache) = cache.filter(|_| admitted.anonymous()) else {
        return Ok(None);
    };
    let key = cache_key(&admitted.ask.request);
    match cache.lookup(&key, api.deadline()).await {
        Ok(body) => {
            let cached = Some((cache.clone(), key));
            let operation = admitted.operation.clone();
            Err(PipelineResponse::body(
                operation, None, body, cached, true, None,
            ))
        }
        Err(computation) => Ok(Some(Storing {
            cache: cache.clone(),
            start: cache.position(),
            key,
            computation,
        })),
    }
}

/// Runs the request: on the read replica for an anonymous query, with
/// what it shows recorded when its response is to be cached.
async fn execute(
    api: &Api,
    admitted: Admitted,
    storing: Option<Storing>,
    permit: Permit,
) -> PipelineResponse {
    let (cost, anonymous) = (admitted.cost(), admitted.anonymous());
    // An anonymous query may read the replica; anything else, the primary.
    let on_replica = admitted.ask.authorization.is_none() && admitted.is_query();
    let with_cost = admitted.ask.with_cost && admitted.checked.is_some();
    let (state, client) = (&api.state, admitted.ask.client);
    let context = match storing {
        Some(_) => RequestContext::recorded(state, client),
        None => {
            let session = Session::from_authorization(admitted.ask.authorization.as_deref());
            RequestContext::new(state, session, client)
        }
    };
    let context = if on_replica {
        context.on_replica()
    } else {
        context
    };
    let (request, recorded) = context.attach(admitted.ask.request);
    let mut response = api.execute_checked(request, admitted.checked).await;
    let code = first_code(&response);
    if with_cost {
        let limit = api.guard.limits.max_query_cost;
        let report = async_graphql::value!({ "requested": cost, "limit": limit });
        response.extensions.insert("cost".to_owned(), report);
    }
    let operation = admitted.operation;
    if is_request_error(&response) {
        let outcome = ResponseContent::RequestError(response);
        return PipelineResponse {
            operation,
            code,
            outcome,
        };
    }
    let body = response_body(&mut response, storing.is_some(), &recorded, cost);
    let cached = storing.map(|storing| store(storing, response.is_ok(), &recorded, &body));
    PipelineResponse::body(operation, code, body, cached, anonymous, Some(permit))
}

/// The body to serve; a response to cache is kept as a template, for
/// logged-in readers too, unless it shows who the caller is.
fn response_body(
    response: &mut async_graphql::Response,
    to_cache: bool,
    recorded: &Recording,
    cost: u64,
) -> Arc<Cached> {
    let ok = response.is_ok();
    let template = match (ok && to_cache, recorded.holes()) {
        (true, Some(holes)) if !holes.shows_caller() => holes.template(response),
        _ => None,
    };
    Arc::new(match template {
        Some(template) => Cached::template(template),
        None if ok => Cached::new(json_body(response, cost)),
        None => Cached::failed(json_body(response, cost)),
    })
}

/// Stores a computed anonymous response (when it succeeded) and hands it
/// to the requests that waited for it; the entry it is served as.
fn store(
    storing: Storing,
    ok: bool,
    recorded: &Recording,
    body: &Arc<Cached>,
) -> (Arc<ResponseCache>, String) {
    let Storing {
        cache,
        key,
        start,
        computation,
    } = storing;
    if let (true, Some(deps)) = (ok, recorded.take()) {
        cache.put(key.clone(), start, deps, body.clone());
    }
    if let Some(computation) = computation {
        computation.publish(body.clone());
    }
    (cache, key)
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

/// `response` as JSON, in a buffer sized from its query's cost (not grown
/// by copying), trimmed when the guess was long: a cached body holds no
/// capacity the cache's byte count would not see.
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

/// A logged-in query's body, from its template (`templates.rs`), filled
/// with the reader's votes, read with their session in one step. None
/// when it must run whole: no logged-in query, it reads who the caller
/// is, or it (or Redis) failed.
async fn logged_in_page(api: &Api, admitted: &Admitted) -> Option<bytes::Bytes> {
    let cache = api
        .state
        .responses
        .as_ref()
        .filter(|_| admitted.logged_in_query())?;
    let checked = admitted.checked.clone()?;
    let request = &admitted.ask.request;
    let key = format!("\u{1}{}", cache_key(request));
    let client = admitted.ask.client;
    let cached = template(api, cache, &key, client, request, checked).await?;
    let template = cached.as_template()?;
    let session = Session::from_authorization(admitted.ask.authorization.as_deref());
    let Some(token) = session.token() else {
        return Some(template.anonymous());
    };
    let (hash, ids) = (token_hash(token), template.ids());
    match api.state.store.session_votes(&hash, &ids).await.ok()? {
        Some((SessionUser::Active(_), votes)) => Some(template.fill(&votes)),
        // An unknown, expired or banned token reads as anonymous, as
        // everywhere.
        _ => Some(template.anonymous()),
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
    checked: Checked,
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
    let (copy, recorded) = RequestContext::recorded(&api.state, client).attach(copy);
    let mut response = api.execute_checked(copy, Some(checked)).await;
    let holes = recorded.holes()?;
    let cached = if holes.shows_caller() {
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

/// Whether `response` failed before execution (parse, validation or
/// variable errors only, and no data): the spec wants no `data` key then.
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
