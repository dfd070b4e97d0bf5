//! The one error type, and the one place where it becomes a GraphQL error:
//! every failure a client sees has a stable `extensions.code`; internal ones
//! are logged with their cause and reach the client as a generic message.

#[cfg(feature = "graphql")]
use async_graphql::ServerError;
use async_graphql_parser::Pos;
use http::StatusCode;

use crate::rate::{RateAction, RateScope};

/// Everything that can go wrong while serving a request.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AppError {
    /// Input that breaks a rule of the API; `field` names the argument.
    #[error("{message}")]
    BadInput {
        field: &'static str,
        message: String,
    },
    #[error("{0}")]
    Unauthenticated(&'static str),
    #[error("{0}")]
    Forbidden(&'static str),
    /// The account is banned until `until` (Unix seconds), or for good.
    #[error("this account is banned{}", .until.map(|u| format!(" until {}", rfc3339(u))).unwrap_or_default())]
    Banned { until: Option<u64> },
    #[error("{0}")]
    NotFound(String),
    #[error("voting on this article closed one week after it was posted")]
    VotingClosed,
    #[error("the slug {0:?} is already used by another article")]
    SlugTaken(String),
    /// A rate limit refused the call; nothing was written.
    #[error(
        "too many {}{}; try again in {retry_after_secs} seconds",
        .action.counted(),
        .scope.suffix()
    )]
    RateLimited {
        action: RateAction,
        scope: RateScope,
        retry_after_secs: u64,
    },
    #[error("too many subscriptions: at most {max} active subscriptions per connection")]
    TooManySubscriptions { max: usize },
    #[error(
        "too many {}connections from this address",
        if *.websocket { "WebSocket " } else { "" }
    )]
    TooManyConnections {
        websocket: bool,
        retry_after_secs: u64,
    },
    /// Redis could not be reached or answered with an error.
    #[error("storage unavailable")]
    Storage(#[source] redis::RedisError),
    /// The pool could not hand out a connection in time; `cause` is why
    /// the last dial to `address` failed, for the log.
    #[error("storage unavailable")]
    StorageTimeout { address: String, cause: String },
    /// A write got no answer (timeout, lost connection, the deadline): it
    /// may have been applied. `cause` is for the log.
    #[error("storage did not answer: the write may have been applied; retrying the same mutation is safe")]
    OutcomeUnknown { cause: String },
    /// `--wait-replicas`: the write is on the primary, but fewer replicas
    /// than asked confirmed it in time, so a failover now could lose it.
    #[error(
        "the write was applied but only {acked} of {wanted} replicas confirmed it in time: it could be lost if the primary fails now; read it back before retrying"
    )]
    NotReplicated { acked: i64, wanted: u32 },
    /// A bug or broken invariant; the detail goes to the log only.
    #[error("internal error")]
    Internal(String),
    /// Over one of the document limits (`graphql::limits`).
    #[error("{0}")]
    QueryTooComplex(String),
    #[error("the request took longer than {ms} ms and was stopped")]
    Timeout { ms: u64 },
    /// The HTTP request itself is unusable (malformed JSON, no query…).
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    UndeclaredVariable(String),
    #[error("the request body is larger than {max_bytes} bytes")]
    PayloadTooLarge { max_bytes: usize },
    #[error("the request's headers are larger than {max_bytes} bytes")]
    HeadersTooLarge { max_bytes: usize },
    #[error("send the request as JSON: content-type application/json or application/graphql-response+json")]
    UnsupportedMediaType,
    #[error("only queries can be sent with GET; send mutations with POST")]
    MethodNotAllowed,
    /// A method `/graphql` does not serve (PUT, DELETE…).
    #[error("/graphql serves GET (queries only) and POST")]
    UnsupportedMethod,
    /// A method other than GET on a path that serves only GET.
    #[error("this path serves GET only")]
    GetOnly,
    #[error("no such path: the API is at /graphql")]
    UnknownPath,
    #[error("the request body was not received in time")]
    RequestTimeout,
    #[error("the server is at its connection limit; try again shortly")]
    Overloaded,
    /// A sign-up waits for the first indexing of names (or a case twin
    /// could slip in).
    #[error(
        "the server is still indexing existing accounts; try again in {retry_after_secs} seconds"
    )]
    Starting { retry_after_secs: u64 },
    /// Redis is near its `maxmemory`: the room is kept for users' writes.
    #[error("the server is not registering new persisted queries now (its storage is nearly full); send the query text without extensions.persistedQuery, or try again in {retry_after_secs} seconds")]
    RegistrationsPaused { retry_after_secs: u64 },
    /// No room in the work budget (`budget.rs`) in time.
    #[error("the server is busy with other requests; try again in {retry_after_secs} second(s)")]
    Busy { retry_after_secs: u64 },
    /// An action that may remove an admin found, each time it counted the
    /// admins of a cluster's shards, that another had counted since (see
    /// `store/moderation.rs`). Nothing was written.
    #[error("other changes of admins ran at the same moment, so this one was not made; try again in {retry_after_secs} second(s)")]
    AdminsContended { retry_after_secs: u64 },
    /// A cluster shard's outbox is full: its changes for other shards are
    /// not being applied (see `store/outbox.rs`).
    #[error("this write must wait while earlier changes reach the rest of the site; try again in {retry_after_secs} second(s)")]
    Backlogged { retry_after_secs: u64 },
    /// The document does not parse; `pos` (in `locations`) is where.
    #[error("{message}")]
    Syntax { message: String, pos: Option<Pos> },
    /// The document breaks a rule the parser checks (a fragment twice…).
    #[error("{message}")]
    InvalidDocument { message: String, pos: Option<Pos> },
    /// A variable's value does not coerce to its type (checked up front).
    #[error("{message}")]
    VariableCoercion { message: String, pos: Option<Pos> },
    /// An unknown persisted query's hash or `documentId`. The message is
    /// the protocol's constant: urql and others match it, Apollo Client the
    /// code.
    #[error("PersistedQueryNotFound")]
    PersistedQueryNotFound,
    /// Under `--trusted-documents-only`: a document that is not one of the
    /// trusted documents (Apollo's code for a safelist's refusal).
    #[error("{0}")]
    PersistedQueryNotInList(&'static str),
}

impl AppError {
    pub fn bad_input(field: &'static str, message: impl Into<String>) -> Self {
        AppError::BadInput {
            field,
            message: message.into(),
        }
    }

    /// A rate limit's refusal; the wait is at least one second, so a client
    /// told to wait never retries at once.
    pub fn rate_limited(action: RateAction, scope: RateScope, retry_after_secs: u64) -> Self {
        AppError::RateLimited {
            action,
            scope,
            retry_after_secs: retry_after_secs.max(1),
        }
    }

    /// A failed write: one Redis answered with an error did not run, one
    /// that got no answer may have.
    pub fn of_write(err: redis::RedisError) -> Self {
        match err.code() {
            Some(_) => AppError::Storage(err),
            None => AppError::OutcomeUnknown {
                cause: err.to_string(),
            },
        }
    }

    /// The machine-readable code clients switch on.
    pub fn code(&self) -> ErrorCode {
        match self {
            AppError::BadInput { .. } => ErrorCode::BadUserInput,
            AppError::Unauthenticated(_) => ErrorCode::Unauthenticated,
            AppError::Forbidden(_) => ErrorCode::Forbidden,
            AppError::Banned { .. } => ErrorCode::Banned,
            AppError::NotFound(_) => ErrorCode::NotFound,
            AppError::VotingClosed => ErrorCode::VotingClosed,
            AppError::SlugTaken(_) => ErrorCode::SlugTaken,
            AppError::RateLimited { .. }
            | AppError::TooManySubscriptions { .. }
            | AppError::TooManyConnections { .. } => ErrorCode::RateLimited,
            AppError::Storage(_) | AppError::StorageTimeout { .. } | AppError::Internal(_) => {
                ErrorCode::Internal
            }
            AppError::QueryTooComplex(_) => ErrorCode::QueryTooComplex,
            AppError::Timeout { .. } => ErrorCode::Timeout,
            AppError::BadRequest(_) => ErrorCode::BadRequest,
            AppError::UndeclaredVariable(_) => ErrorCode::GraphqlValidationFailed,
            AppError::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            AppError::HeadersTooLarge { .. } => ErrorCode::HeadersTooLarge,
            AppError::UnsupportedMediaType => ErrorCode::UnsupportedMediaType,
            AppError::MethodNotAllowed | AppError::UnsupportedMethod | AppError::GetOnly => {
                ErrorCode::MethodNotAllowed
            }
            AppError::UnknownPath => ErrorCode::NotFound,
            AppError::RequestTimeout => ErrorCode::RequestTimeout,
            AppError::Overloaded
            | AppError::Busy { .. }
            | AppError::Backlogged { .. }
            | AppError::AdminsContended { .. }
            | AppError::RegistrationsPaused { .. }
            | AppError::Starting { .. } => ErrorCode::ServiceUnavailable,
            AppError::Syntax { .. } => ErrorCode::GraphqlParseFailed,
            AppError::InvalidDocument { .. } => ErrorCode::GraphqlValidationFailed,
            AppError::VariableCoercion { .. } => ErrorCode::BadUserInput,
            AppError::PersistedQueryNotFound => ErrorCode::PersistedQueryNotFound,
            AppError::PersistedQueryNotInList(_) => ErrorCode::PersistedQueryNotInList,
            AppError::NotReplicated { .. } => ErrorCode::NotReplicated,
            AppError::OutcomeUnknown { .. } => ErrorCode::OutcomeUnknown,
        }
    }

    /// The HTTP status of a response that fails with this error before any
    /// GraphQL execution (errors during execution answer 200).
    pub fn http_status(&self) -> StatusCode {
        match self {
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            AppError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            AppError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AppError::MethodNotAllowed | AppError::UnsupportedMethod | AppError::GetOnly => {
                StatusCode::METHOD_NOT_ALLOWED
            }
            AppError::UnknownPath => StatusCode::NOT_FOUND,
            AppError::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            AppError::Overloaded
            | AppError::Busy { .. }
            | AppError::Backlogged { .. }
            | AppError::AdminsContended { .. }
            | AppError::RegistrationsPaused { .. }
            | AppError::Starting { .. } => StatusCode::SERVICE_UNAVAILABLE,
            AppError::RateLimited { .. } | AppError::TooManyConnections { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            _ => StatusCode::OK,
        }
    }

    /// The HTTP status of the same refusal under
    /// `application/graphql-response+json`, which has no `200` for a
    /// response without `data` (an unknown persisted query is `404`, as
    /// with Apollo's servers).
    pub fn graphql_response_status(&self) -> StatusCode {
        match self {
            AppError::PersistedQueryNotFound => StatusCode::NOT_FOUND,
            AppError::Storage(_)
            | AppError::StorageTimeout { .. }
            | AppError::OutcomeUnknown { .. } => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            AppError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            _ => match self.http_status() {
                StatusCode::OK => StatusCode::BAD_REQUEST,
                status => status,
            },
        }
    }

    /// Whole seconds a client should wait before trying again, when the
    /// error says (`extensions.retryAfter`, and `Retry-After` over HTTP).
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            AppError::RateLimited {
                retry_after_secs, ..
            }
            | AppError::TooManyConnections {
                retry_after_secs, ..
            }
            | AppError::Busy { retry_after_secs }
            | AppError::Backlogged { retry_after_secs }
            | AppError::AdminsContended { retry_after_secs }
            | AppError::RegistrationsPaused { retry_after_secs }
            | AppError::Starting { retry_after_secs } => Some(*retry_after_secs),
            AppError::Overloaded => Some(1),
            _ => None,
        }
    }

    /// The JSON body of a response refused before any GraphQL execution:
    /// `{"errors": [...]}`, with no `data` key since nothing ran.
    #[cfg(feature = "graphql")]
    pub fn into_json_body(self) -> String {
        #[derive(serde::Serialize)]
        struct Errors {
            errors: [ServerError; 1],
        }
        serde_json::to_string(&Errors {
            errors: [self.into_server_error()],
        })
        .unwrap_or_default()
    }

    /// This error as a GraphQL error with its code, for failures outside
    /// any resolver (document limits, deadlines, HTTP-level problems).
    #[cfg(feature = "graphql")]
    pub fn into_server_error(self) -> ServerError {
        let pos = match &self {
            AppError::Syntax { pos, .. }
            | AppError::InvalidDocument { pos, .. }
            | AppError::VariableCoercion { pos, .. } => *pos,
            _ => None,
        };
        let mut error = ServerError::new(self.to_string(), pos);
        error.source = Some(std::sync::Arc::new(self));
        assign_code(&mut error);
        error
    }
}

/// Defines [`ErrorCode`], its list and its text from one table, so that
/// the list cannot miss a code.
macro_rules! error_codes {
    ($($variant:ident => $text:literal,)*) => {
        /// Every `extensions.code` votegraph sends: what clients switch on,
        /// and the `code` label of the request metrics.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($variant,)*
        }

        impl ErrorCode {
            /// Every code, once.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as it is sent.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)*
                }
            }
        }
    };
}

error_codes! {
    BadUserInput => "BAD_USER_INPUT",
    Unauthenticated => "UNAUTHENTICATED",
    Forbidden => "FORBIDDEN",
    Banned => "BANNED",
    NotFound => "NOT_FOUND",
    VotingClosed => "VOTING_CLOSED",
    SlugTaken => "SLUG_TAKEN",
    RateLimited => "RATE_LIMITED",
    Internal => "INTERNAL",
    QueryTooComplex => "QUERY_TOO_COMPLEX",
    Timeout => "TIMEOUT",
    BadRequest => "BAD_REQUEST",
    GraphqlParseFailed => "GRAPHQL_PARSE_FAILED",
    GraphqlValidationFailed => "GRAPHQL_VALIDATION_FAILED",
    PersistedQueryNotFound => "PERSISTED_QUERY_NOT_FOUND",
    PersistedQueryNotInList => "PERSISTED_QUERY_NOT_IN_LIST",
    NotReplicated => "NOT_REPLICATED",
    OutcomeUnknown => "OUTCOME_UNKNOWN",
    PayloadTooLarge => "PAYLOAD_TOO_LARGE",
    HeadersTooLarge => "HEADERS_TOO_LARGE",
    UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
    MethodNotAllowed => "METHOD_NOT_ALLOWED",
    RequestTimeout => "REQUEST_TIMEOUT",
    ServiceUnavailable => "SERVICE_UNAVAILABLE",
}

impl ErrorCode {
    /// The code sent as `text`, if it is one of votegraph's.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|code| code.as_str() == text)
    }
}

impl From<redis::RedisError> for AppError {
    fn from(err: redis::RedisError) -> Self {
        AppError::Storage(err)
    }
}

/// Gives a GraphQL error its `extensions.code`: the one place where errors
/// meet the wire. An [`AppError`] is the error's source (async-graphql keeps
/// it); any other error is async-graphql's own (syntax, validation,
/// argument coercion), and the client's doing.
#[cfg(feature = "graphql")]
pub fn assign_code(error: &mut ServerError) {
    truncate_message(&mut error.message);
    let mut ext = error.extensions.take().unwrap_or_default();
    if let Some(app) = error.source::<AppError>() {
        match app {
            AppError::Storage(cause) => tracing::error!(error = %cause, "redis request failed"),
            AppError::StorageTimeout { address, cause } => {
                tracing::error!(redis = %address, error = %cause, "no redis connection")
            }
            AppError::Internal(cause) => tracing::error!(error = %cause, "internal error"),
            AppError::OutcomeUnknown { cause } => {
                tracing::error!(error = %cause, "a write got no answer")
            }
            _ => {}
        }
        ext.set("code", app.code().as_str());
        if let AppError::BadInput { field, .. } = app {
            ext.set("field", *field);
        }
        if let AppError::Banned { until } = app {
            ext.set("until", until.map(rfc3339));
        }
        if let Some(secs) = app.retry_after() {
            ext.set("retryAfter", secs);
        }
    } else if ext.get("code").is_none() {
        let code = if !error.path.is_empty() {
            ErrorCode::BadUserInput
        } else if error.message.trim_start().starts_with("-->") {
            ErrorCode::GraphqlParseFailed
        } else {
            ErrorCode::GraphqlValidationFailed
        };
        ext.set("code", code.as_str());
    }
    error.extensions = Some(ext);
}

/// Longest error message sent: the parser's and validator's quote the
/// document, and a huge input must not come back as a huge error.
#[cfg(feature = "graphql")]
pub(crate) const MAX_MESSAGE_BYTES: usize = 512;

#[cfg(feature = "graphql")]
fn truncate_message(message: &mut String) {
    if message.len() > MAX_MESSAGE_BYTES {
        message.truncate(message.floor_char_boundary(MAX_MESSAGE_BYTES));
        message.push_str("… (truncated)");
    }
}

pub type AppResult<T> = Result<T, AppError>;

/// `secs` (Unix seconds) as an RFC 3339 instant in UTC.
pub fn rfc3339(secs: u64) -> String {
    chrono::DateTime::from_timestamp(secs as i64, 0)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_listed_once_and_reads_back() {
        let mut seen = std::collections::HashSet::new();
        for &code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "{code:?} twice");
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::parse("OK"), None);
    }
}
