//! Batched reads for what a page of already-shown things holds: the journals, traces,
//! notes and waits of many tasks, the citation checks of many traces, the files of many
//! documents, each in one statement however long the page. GraphQL's loaders gather the
//! keys of a list's items and call these; the items passed the caller's checks (the list
//! that found them) before their ids reach here.
use std::collections::HashMap;

use entity::research_task_wait as wait;
use entity::{Journal, answer_trace, knowledge_document_file as file, research_task_note as note};
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use super::AppError;
use crate::store;

/// For each of `tasks`, its journal `J` rows after `after`, at most `size`, in order.
pub async fn journal_pages<J: Journal>(
    db: &DatabaseConnection,
    tasks: &[Uuid],
    after: i32,
    size: u64,
) -> Result<Vec<J::Model>, AppError> {
    Ok(store::journal::after_for_tasks::<J, _>(db, tasks, after, size).await?)
}

/// The answer traces of tasks given as `(task, tenant, subject)`, each owned by the
/// task's own subject.
pub async fn traces_of_tasks(
    db: &DatabaseConnection,
    tasks: &[(Uuid, String, String)],
) -> Result<Vec<answer_trace::Model>, AppError> {
    Ok(store::answer_traces::find_for_tasks(db, tasks).await?)
}

/// The citation check rows of answer traces (checks and citations), by trace id (a trace
/// without checks is absent).
pub async fn checks_of_traces(
    db: &DatabaseConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, entity::answer_trace_citation_check::Model>, AppError> {
    Ok(store::answer_traces::checks_for(db, ids).await?)
}

/// The waits for a person of tasks, by task id, oldest first.
pub async fn waits_of_tasks(
    db: &DatabaseConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<wait::Model>>, AppError> {
    Ok(store::waits::of_tasks(db, ids).await?)
}

/// The steering notes of tasks, by task id, oldest first.
pub async fn notes_of_tasks(
    db: &DatabaseConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<note::Model>>, AppError> {
    Ok(store::notes::of_tasks(db, ids).await?)
}

/// The thread each of the tasks is a turn of, by task id (a task outside threads is
/// absent).
pub async fn threads_of_tasks(db: &DatabaseConnection, ids: &[Uuid]) -> Result<HashMap<Uuid, Uuid>, AppError> {
    let turns = store::threads::threads_of(db, ids).await?;
    Ok(turns.into_iter().map(|turn| (turn.research_task_job_id, turn.research_thread_id)).collect())
}

/// The uploaded files of documents, by document id (a document without one is absent).
pub async fn files_of_documents(db: &DatabaseConnection, ids: &[Uuid]) -> Result<HashMap<Uuid, file::Model>, AppError> {
    Ok(store::files::of_documents(db, ids).await?)
}
