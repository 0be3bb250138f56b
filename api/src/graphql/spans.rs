//! Tracing spans for GraphQL, in place of async-graphql's own `Tracing` extension, which
//! records each document *with its variables inlined* (task queries, document content)
//! in its `parse` span. The transports open an operation's span ([`operation_span`]),
//! named by the operation, never its variables; this extension adds a span per resolver
//! of an object type (leaves are not worth one), so the time each took shows. Both are
//! DEBUG: enable them with `RUST_LOG=api=debug`.
use std::sync::Arc;

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextResolve, ResolveInfo};
use async_graphql::parser::types::DocumentOperations;
use async_graphql::registry::MetaTypeName;
use async_graphql::{Request, ServerResult, Value};
use tracing::Instrument as _;

/// The span one operation runs in: `graphql operation` with the operation's name (from
/// `operationName`, or the document's one named operation), never its variables. Call it
/// on a request the guard prepared, whose document is parsed already.
pub fn operation_span(request: &mut Request) -> tracing::Span {
    let named = request.operation_name.clone();
    let name = named.or_else(|| match &request.parsed_query().ok()?.operations {
        DocumentOperations::Single(_) => None,
        DocumentOperations::Multiple(operations) if operations.len() == 1 => {
            operations.keys().next().map(|name| name.to_string())
        }
        DocumentOperations::Multiple(_) => None,
    });
    tracing::debug_span!("graphql operation", operation.name = name.as_deref().unwrap_or("(anonymous)"))
}

/// The extension factory to register on the schema.
pub struct Spans;

impl ExtensionFactory for Spans {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(SpansExtension)
    }
}

struct SpansExtension;

#[async_trait::async_trait]
impl Extension for SpansExtension {
    async fn resolve(
        &self,
        ctx: &ExtensionContext<'_>,
        info: ResolveInfo<'_>,
        next: NextResolve<'_>,
    ) -> ServerResult<Option<Value>> {
        let concrete = MetaTypeName::concrete_typename(info.return_type);
        let leaf = ctx.schema_env.registry.types.get(concrete).is_none_or(|ty| ty.is_leaf());
        if leaf || info.is_for_introspection {
            return next.run(ctx, info).await;
        }
        let span = tracing::debug_span!("resolver", path = %info.path_node, parent_type = %info.parent_type);
        next.run(ctx, info).instrument(span).await
    }
}
