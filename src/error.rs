//! The one error type of votegraph, and the one place where it becomes a
//! GraphQL error.
//!
//! Every failure a client can see carries a stable `extensions.code`; storage
//! and other internal failures are logged with their cause and reach the
//! client only as a generic message, so no internal detail leaks.

use async_graphql::ServerError;

use crate::store::keys::RateAction;

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
    /// A rate limit refused the call; nothing was written. The message names
    /// what was counted ("too many votes; try again in 12 seconds").
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

    /// A rate limit's refusal; the wait is at least one second, so a client
    /// told to wait never retries at once.
    pub fn rate_limited(action: RateAction, scope: RateScope, retry_after_secs: u64) -> Self {
        AppError::RateLimited {
            action,
            scope,
            retry_after_secs: retry_after_secs.max(1),
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
            AppError::RateLimited { .. } => "RATE_LIMITED",
            AppError::Storage(_) | AppError::StorageTimeout | AppError::Internal(_) => "INTERNAL",
        }
    }
}

/// Whose budget a rate limit counted, as the error message says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateScope {
    /// A user name (logIn's per-name limit, whoever sends the attempts).
    Name,
    /// The client address.
    Address,
    /// The logged-in user.
    User,
}

impl RateScope {
    fn suffix(self) -> &'static str {
        match self {
            RateScope::Name => " for this name",
            RateScope::Address => " from this address",
            RateScope::User => "",
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
            AppError::RateLimited {
                retry_after_secs, ..
            } => ext.set("retryAfter", *retry_after_secs),
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

pub type AppResult<T> = Result<T, AppError>;
