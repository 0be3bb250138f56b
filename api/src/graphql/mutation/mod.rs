//! The Mutation root, merged from one object per concern so each file stays small.

mod keys;
mod spaces;
mod tasks;

use async_graphql::MergedObject;

/// Writes.
#[derive(MergedObject, Default)]
#[graphql(name = "Mutation")]
pub struct MutationRoot(spaces::SpaceMutation, keys::KeyMutation, tasks::TaskMutation);
