//! The one error type of votegraph, and the one place where it becomes a
//! GraphQL error.
//!
//! Every failure a client can see carries a stable `extensions.code`; storage
//! and other internal failures are logged with their cause and reach the
//! client only as a generic message, so no internal detail leaks.

use async_graphql::ServerError;

/// Everything that can go wrong while serving a request.
#[derive(Debug, thiserror::Error)]
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
    #[error("{0}")]
    NotFound(String),
    #[error("voting on this article closed one week after it was posted")]
    VotingClosed,
    #[error("the slug {0:?} is already used by another article")]
    SlugTaken(String),
    #[error("too many login attempts for this name; try again in {retry_after_secs} seconds")]
    RateLimited { retry_after_secs: u64 },
    /// One WebSocket connection asked for more concurrent operations than
    /// the server gives a connection.
    #[error("too many subscriptions: at most {max} active subscriptions per connection")]
    TooManySubscriptions { max: usize },
    /// One address holds as many WebSocket connections as it may.
    #[error("too many WebSocket connections from this address")]
    TooManyConnections { retry_after_secs: u64 },
    /// Redis could not be reached or answered with an error.
    #[error("storage unavailable")]
    Storage(#[source] redis::RedisError),
    /// The pool could not hand out a connection in time.
    #[error("storage unavailable")]
    StorageTimeout,
    /// A bug or broken invariant; the detail goes to the log only.
    #[error("internal error")]
    Internal(String),
}

impl AppError {
    pub fn bad_input(field: &'static str, message: impl Into<String>) -> Self {
        AppError::BadInput {
            field,
            message: message.into(),
        }
    }

    /// The machine-readable code clients switch on.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::BadInput { .. } => "BAD_USER_INPUT",
            AppError::Unauthenticated(_) => "UNAUTHENTICATED",
            AppError::Forbidden(_) => "FORBIDDEN",
            AppError::NotFound(_) => "NOT_FOUND",
            AppError::VotingClosed => "VOTING_CLOSED",
            AppError::SlugTaken(_) => "SLUG_TAKEN",
            AppError::RateLimited { .. }
            | AppError::TooManySubscriptions { .. }
            | AppError::TooManyConnections { .. } => "RATE_LIMITED",
            AppError::Storage(_) | AppError::StorageTimeout | AppError::Internal(_) => "INTERNAL",
        }
    }
}

impl From<redis::RedisError> for AppError {
    fn from(err: redis::RedisError) -> Self {
        AppError::Storage(err)
    }
}

impl From<bb8::RunError<redis::RedisError>> for AppError {
    fn from(err: bb8::RunError<redis::RedisError>) -> Self {
        match err {
            bb8::RunError::User(e) => AppError::Storage(e),
            bb8::RunError::TimedOut => AppError::StorageTimeout,
        }
    }
}

/// Gives a GraphQL error its `extensions.code`; the one place where errors
/// meet the wire.
///
/// Resolvers return [`AppError`] with `?`, which async-graphql wraps keeping
/// the original as the error's source; it is read back here. Errors without
/// an [`AppError`] come from async-graphql itself (syntax, validation, or
/// argument coercion) and are the client's doing.
pub fn assign_code(error: &mut ServerError) {
    let mut ext = error.extensions.take().unwrap_or_default();
    if let Some(app) = error.source::<AppError>() {
        match app {
            AppError::Storage(cause) => tracing::error!(error = %cause, "redis request failed"),
            AppError::StorageTimeout => tracing::error!("timed out waiting for a redis connection"),
            AppError::Internal(cause) => tracing::error!(error = %cause, "internal error"),
            _ => {}
        }
        ext.set("code", app.code());
        match app {
            AppError::BadInput { field, .. } => ext.set("field", *field),
            AppError::RateLimited { retry_after_secs }
            | AppError::TooManyConnections { retry_after_secs } => {
                ext.set("retryAfter", *retry_after_secs)
            }
            _ => {}
        }
    } else if ext.get("code").is_none() {
        let code = if !error.path.is_empty() {
            "BAD_USER_INPUT"
        } else if error.message.trim_start().starts_with("-->") {
            "GRAPHQL_PARSE_FAILED"
        } else {
            "GRAPHQL_VALIDATION_FAILED"
        };
        ext.set("code", code);
    }
    error.extensions = Some(ext);
}

/// An error raised outside GraphQL execution (by the WebSocket protocol or
/// an HTTP guard) as the GraphQL error a client expects, with the same
/// `extensions` as errors from resolvers.
pub fn server_error(err: AppError) -> ServerError {
    let mut error = ServerError::new(err.to_string(), None);
    error.source = Some(std::sync::Arc::new(err));
    assign_code(&mut error);
    error
}

pub type AppResult<T> = Result<T, AppError>;
