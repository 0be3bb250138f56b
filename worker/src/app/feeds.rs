//! The reads a live feed makes after its subscriber was authorized: a task's journal, its
//! answer draft and trace, a document's rows, the API keys open connections hold. A feed
//! (one shared reader per task or document in the API process) serves many callers, so
//! these read by id; who may follow what is decided when a subscription starts
//! ([`super::tasks::find`], [`super::access`]) and re-checked by the feed through
//! [`grant_holds`] and [`super::keys::holds`].
use entity::{Journal, answer_trace, api_key, knowledge_document as document, knowledge_document_file as file};
use entity::{research_task_answer_draft as draft, research_task_job as job};
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use super::AppError;
use crate::knowledge::uploads::{ShownStatus, shown_status};
use crate::store;

/// A document as a status feed shows it: its row, its uploaded file's row if it has one,
/// and the status the two give together.
pub type DocumentNow = (document::Model, Option<file::Model>, ShownStatus);

/// The task as it is now.
pub async fn task(db: &DatabaseConnection, id: Uuid) -> Result<Option<job::Model>, AppError> {
    Ok(store::tasks::find(db, id).await?)
}

/// Up to `limit` rows of the task's journal `J` after sequence `after`, in order.
pub async fn journal_after<J: Journal>(
    db: &DatabaseConnection,
    task_id: Uuid,
    after: i32,
    limit: u64,
) -> Result<Vec<J::Model>, AppError> {
    Ok(store::journal::after::<J, _>(db, task_id, after, limit).await?)
}

/// The task's highest sequence in journal `J` so far (0 for none).
pub async fn last_sequence<J: Journal>(db: &DatabaseConnection, task_id: Uuid) -> Result<i32, AppError> {
    Ok(store::journal::last_sequence::<J, _>(db, task_id).await?)
}

/// The answer the task's generating stage has streamed so far, if any.
pub async fn draft(db: &DatabaseConnection, task_id: Uuid) -> Result<Option<draft::Model>, AppError> {
    Ok(store::drafts::find(db, task_id).await?)
}

/// The task's answer trace, owned by the task's own subject.
pub async fn answer_trace(db: &DatabaseConnection, task: &job::Model) -> Result<Option<answer_trace::Model>, AppError> {
    Ok(store::answer_traces::find_for_task(db, &task.tenant_id, &task.subject_id, task.id).await?)
}

/// Whether the grant a task runs under still holds at `now` (epoch ms).
pub async fn grant_holds(db: &DatabaseConnection, snapshot_id: Uuid, now: i64) -> Result<bool, AppError> {
    Ok(crate::grant::check(db, snapshot_id, now).await?.holds())
}

/// The tenant's document `id` with its file and shown status, if it exists.
pub async fn document(db: &DatabaseConnection, tenant_id: &str, id: Uuid) -> Result<Option<DocumentNow>, AppError> {
    let Some(found) = store::documents::find(db, tenant_id, id).await? else { return Ok(None) };
    let file = store::files::find(db, id).await?;
    let shown = shown_status(file.as_ref().map(|file| file.state), &found);
    Ok(Some((found, file, shown)))
}

/// The API keys `ids` as they are now (revoked and expired ones too; a missing id is a
/// deleted key).
pub async fn api_keys(db: &DatabaseConnection, ids: &[Uuid]) -> Result<Vec<api_key::Model>, AppError> {
    Ok(store::api_keys::find_many(db, ids).await?)
}
