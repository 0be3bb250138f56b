//! Gives every error an `extensions.code`. Resolver errors carry theirs (see `ApiError`);
//! errors raised by async-graphql itself (parsing, validation, depth and complexity
//! limits, input coercion) get one here, for HTTP and WebSocket alike.
use std::sync::Arc;

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextRequest, NextSubscribe};
use async_graphql::{Response, ServerError};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

/// The extension factory to register on the schema.
pub struct ErrorCodes;

impl ExtensionFactory for ErrorCodes {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(ErrorCodesExtension)
    }
}

struct ErrorCodesExtension;

#[async_trait::async_trait]
impl Extension for ErrorCodesExtension {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        with_codes(next.run(ctx).await)
    }

    fn subscribe<'s>(
        &self,
        ctx: &ExtensionContext<'_>,
        stream: BoxStream<'s, Response>,
        next: NextSubscribe<'_>,
    ) -> BoxStream<'s, Response> {
        next.run(ctx, stream).map(with_codes).boxed()
    }
}

fn with_codes(mut response: Response) -> Response {
    for error in &mut response.errors {
        ensure_code(error);
    }
    response
}

/// The code for an error async-graphql raised itself.
fn ensure_code(error: &mut ServerError) {
    if error.extensions.as_ref().is_some_and(|values| values.get("code").is_some()) {
        return;
    }
    let code = if error.message.starts_with("Query is too complex")
        || error.message.starts_with("Query is nested too deep")
        || error.message.contains("recursion")
    {
        "TOO_COMPLEX"
    } else {
        "BAD_USER_INPUT"
    };
    error.extensions.get_or_insert_with(Default::default).set("code", code);
}

/// Whether a response failed as a request (no field ran): such errors carry no path.
pub fn is_request_error(response: &Response) -> bool {
    response.data == async_graphql::Value::Null
        && !response.errors.is_empty()
        && response.errors.iter().all(|error| error.path.is_empty())
}
