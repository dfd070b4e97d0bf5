//! Validating a document against the schema without running it (trusted
//! documents, at start-up): async-graphql has no validate call, so an
//! extension ends each request once validated.

use std::sync::Arc;

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextExecute};
use async_graphql::parser::types::DocumentOperations;
use async_graphql::{Request, Response, Value};

/// The schema, with execution replaced by an empty answer.
pub(crate) struct Validator(super::AppSchema);

impl Default for Validator {
    fn default() -> Self {
        Self(super::builder().extension(ValidateOnly).finish())
    }
}

impl Validator {
    /// Whether `text` (which parses) validates against the schema; the
    /// first error if not.
    pub async fn check(&self, text: &str) -> Result<(), String> {
        let mut request = Request::new(text);
        // The rules cover every operation; one is named so that a
        // document of several is not refused for lacking a name.
        if let Ok(DocumentOperations::Multiple(operations)) =
            async_graphql::parser::parse_query(text).map(|d| d.operations)
        {
            request.operation_name = operations.keys().next().map(|name| name.to_string());
        }
        let response = self.0.execute(request).await;
        response
            .errors
            .into_iter()
            .next()
            .map_or(Ok(()), |e| Err(e.message))
    }
}

struct ValidateOnly;

impl ExtensionFactory for ValidateOnly {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(ValidateOnly)
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for ValidateOnly {
    async fn execute(
        &self,
        _ctx: &ExtensionContext<'_>,
        _operation_name: Option<&str>,
        _next: NextExecute<'_>,
    ) -> Response {
        Response::new(Value::Null)
    }
}
