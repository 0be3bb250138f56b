//! The GraphQL schema: Query, Mutation and Subscription roots and the object types mapped
//! from entity models. Resolvers are thin: check the caller (`access`), call one store or
//! lifecycle function, map the result (`types`).

mod context;
mod cost_limit;
pub(crate) mod enums;
pub(crate) mod error_codes;
pub mod guard;
pub mod loaders;
pub(crate) mod mutation;
mod query;
mod relay;
pub mod request_writes;
mod spans;

pub use spans::operation_span;
mod subscription;
pub(crate) mod types;

use async_graphql::{SDLExportOptions, Schema, SchemaBuilder};

/// Re-exported so callers (the server, tests) build requests against this schema's own
/// async-graphql version.
pub use async_graphql::{Request, Response};
pub use context::{principal, state};
pub use cost_limit::CostCheck;
pub use mutation::MutationRoot;
pub use query::QueryRoot;
pub use subscription::SubscriptionRoot;

use crate::state::AppState;

/// The server's schema type.
pub type AppSchema = Schema<QueryRoot, MutationRoot, SubscriptionRoot>;

/// The deepest selection accepted. GraphiQL's introspection query nests `ofType` nine
/// levels under `__schema.types.fields.args.type`, so the limit leaves room for it.
pub const MAX_DEPTH: usize = 16;
/// The most expensive query accepted; list fields multiply their children by `first`.
pub const MAX_COMPLEXITY: usize = 5_000;
/// How deeply the parser may recurse into nested selections and values.
pub const MAX_RECURSIVE_DEPTH: usize = 32;

/// The builder with every limit and extension, but no data.
fn builder() -> SchemaBuilder<QueryRoot, MutationRoot, SubscriptionRoot> {
    Schema::build(QueryRoot, MutationRoot::default(), SubscriptionRoot)
        .limit_depth(MAX_DEPTH)
        .limit_complexity(MAX_COMPLEXITY)
        .limit_recursive_depth(MAX_RECURSIVE_DEPTH)
        .extension(error_codes::ErrorCodes)
        .extension(spans::Spans)
        .extension(cost_limit::CostLimit)
}

/// The schema the server runs, with `state` in its data for every resolver.
pub fn build_schema(state: AppState) -> AppSchema {
    builder().data(state).finish()
}

/// The SDL of a schema, fields and enum items sorted so the checked-in file diffs cleanly.
pub fn sdl(schema: &AppSchema) -> String {
    schema.sdl_with_options(SDLExportOptions::new().sorted_fields().sorted_enum_items())
}

/// The SDL without a database or settings: the schema's shape does not depend on data.
pub fn sdl_without_state() -> String {
    sdl(&builder().finish())
}
