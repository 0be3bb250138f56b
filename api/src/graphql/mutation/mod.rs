//! The Mutation root, merged from one object per concern so each file stays small.

mod deletes;
mod documents;
mod keys;
mod spaces;
pub(crate) mod tasks;
mod threads;
mod uploads;
mod webhooks;

use async_graphql::MergedObject;

/// Writes.
#[derive(MergedObject, Default)]
#[graphql(name = "Mutation")]
pub struct MutationRoot(
    spaces::SpaceMutation,
    documents::DocumentMutation,
    uploads::UploadMutation,
    keys::KeyMutation,
    tasks::TaskMutation,
    threads::ThreadMutation,
    webhooks::WebhookMutation,
    deletes::DeleteMutation,
);
