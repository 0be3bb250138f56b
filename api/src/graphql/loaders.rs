//! Batched reads for fields nested under lists (`researchTasks { edges { node {
//! progressEvents partialResults answerTrace } } }`): async-graphql's DataLoader gathers
//! the keys every item of a list asks for and loads them in one statement per kind, so a
//! page costs the same number of statements at any size. One loader per request (never
//! shared: what one caller may read is never another's cache), created by [`attach`].
use std::collections::HashMap;
use std::sync::Arc;

use async_graphql::dataloader::{DataLoader, Loader};
use entity::Journal;
use entity::{answer_trace, research_task_partial_result as partial, research_task_progress_event as progress};
use sea_orm::DatabaseConnection;
use uuid::Uuid;
use worker::app::{AppError, batches};

/// A page of one task's journal: rows after `after`, at most `size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JournalPage {
    /// The task.
    pub task: Uuid,
    /// The last sequence the caller has.
    pub after: i32,
    /// The most rows wanted.
    pub size: u64,
}

/// Progress events of a task ([`JournalPage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProgressPage(pub JournalPage);

/// Partial results of a task ([`JournalPage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartialPage(pub JournalPage);

/// The answer trace of a task, where the task's own subject owns it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceOfTask {
    /// The task.
    pub task: Uuid,
    /// Its tenant.
    pub tenant_id: String,
    /// Its subject.
    pub subject_id: String,
}

/// The citation checks of an answer trace the caller has already been shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChecksOfTrace(pub Uuid);

/// The thread of a task the caller has already been shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ThreadOfTask(pub Uuid);

/// The steering notes of a task the caller has already been shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NotesOfTask(pub Uuid);

/// The input waits of a task the caller has already been shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WaitsOfTask(pub Uuid);

/// The uploaded file of a document the caller has already been shown, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileOfDocument(pub Uuid);

/// The loaders of one request.
pub struct Loaders {
    db: DatabaseConnection,
}

/// The request's loaders, as resolvers find them in the context.
pub type RequestLoaders = DataLoader<Loaders>;

/// A loader's failure as the API reports it: an outage is still SERVICE_UNAVAILABLE.
pub fn loaded(error: Arc<AppError>) -> AppError {
    // Every field waiting on one batch shares its error; reads raise no constraint errors,
    // so an outage and "internal" are the only answers.
    match Arc::try_unwrap(error) {
        Ok(error) => error,
        Err(shared) => match &*shared {
            AppError::Unavailable(cause) => AppError::Unavailable(anyhow::anyhow!("{cause:#}")),
            other => AppError::internal(anyhow::anyhow!("{other:#}")),
        },
    }
}

/// Gives `request` a loader of its own.
pub fn attach(request: async_graphql::Request, db: &DatabaseConnection) -> async_graphql::Request {
    request.data(DataLoader::new(Loaders { db: db.clone() }, tokio::spawn))
}

/// Loads journal pages: keys asking the same range share one statement.
async fn pages<J: Journal>(
    db: &DatabaseConnection,
    keys: impl Iterator<Item = JournalPage>,
) -> Result<HashMap<JournalPage, Vec<J::Model>>, Arc<AppError>> {
    let mut ranges: HashMap<(i32, u64), Vec<Uuid>> = HashMap::new();
    for key in keys {
        ranges.entry((key.after, key.size)).or_default().push(key.task);
    }
    let mut loaded = HashMap::new();
    for ((after, size), tasks) in ranges {
        let rows = batches::journal_pages::<J>(db, &tasks, after, size).await.map_err(Arc::new)?;
        for task in tasks {
            loaded.insert(JournalPage { task, after, size }, Vec::new());
        }
        for row in rows {
            let task = J::job(&row);
            loaded.entry(JournalPage { task, after, size }).or_insert_with(Vec::new).push(row);
        }
    }
    Ok(loaded)
}

impl Loader<ProgressPage> for Loaders {
    type Value = Vec<progress::Model>;
    type Error = Arc<AppError>;

    async fn load(&self, keys: &[ProgressPage]) -> Result<HashMap<ProgressPage, Self::Value>, Self::Error> {
        let loaded = pages::<progress::Entity>(&self.db, keys.iter().map(|key| key.0)).await?;
        Ok(loaded.into_iter().map(|(key, rows)| (ProgressPage(key), rows)).collect())
    }
}

impl Loader<PartialPage> for Loaders {
    type Value = Vec<partial::Model>;
    type Error = Arc<AppError>;

    async fn load(&self, keys: &[PartialPage]) -> Result<HashMap<PartialPage, Self::Value>, Self::Error> {
        let loaded = pages::<partial::Entity>(&self.db, keys.iter().map(|key| key.0)).await?;
        Ok(loaded.into_iter().map(|(key, rows)| (PartialPage(key), rows)).collect())
    }
}

impl Loader<TraceOfTask> for Loaders {
    type Value = answer_trace::Model;
    type Error = Arc<AppError>;

    async fn load(&self, keys: &[TraceOfTask]) -> Result<HashMap<TraceOfTask, Self::Value>, Self::Error> {
        let tasks: Vec<(Uuid, String, String)> =
            keys.iter().map(|key| (key.task, key.tenant_id.clone(), key.subject_id.clone())).collect();
        let rows = batches::traces_of_tasks(&self.db, &tasks).await.map_err(Arc::new)?;
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let key = keys.iter().find(|key| Some(key.task) == row.research_task_id)?.clone();
                Some((key, row))
            })
            .collect())
    }
}

impl Loader<ChecksOfTrace> for Loaders {
    type Value = entity::answer_trace_citation_check::Model;
    type Error = Arc<AppError>;

    async fn load(&self, keys: &[ChecksOfTrace]) -> Result<HashMap<ChecksOfTrace, Self::Value>, Self::Error> {
        let ids: Vec<Uuid> = keys.iter().map(|key| key.0).collect();
        let rows = batches::checks_of_traces(&self.db, &ids).await.map_err(Arc::new)?;
        Ok(rows.into_iter().map(|(id, row)| (ChecksOfTrace(id), row)).collect())
    }
}

impl Loader<WaitsOfTask> for Loaders {
    type Value = Vec<entity::research_task_wait::Model>;
    type Error = Arc<AppError>;

    async fn load(&self, keys: &[WaitsOfTask]) -> Result<HashMap<WaitsOfTask, Self::Value>, Self::Error> {
        let ids: Vec<Uuid> = keys.iter().map(|key| key.0).collect();
        let mut rows = batches::waits_of_tasks(&self.db, &ids).await.map_err(Arc::new)?;
        Ok(ids.into_iter().map(|id| (WaitsOfTask(id), rows.remove(&id).unwrap_or_default())).collect())
    }
}

impl Loader<NotesOfTask> for Loaders {
    type Value = Vec<entity::research_task_note::Model>;
    type Error = Arc<AppError>;

    async fn load(&self, keys: &[NotesOfTask]) -> Result<HashMap<NotesOfTask, Self::Value>, Self::Error> {
        let ids: Vec<Uuid> = keys.iter().map(|key| key.0).collect();
        let mut rows = batches::notes_of_tasks(&self.db, &ids).await.map_err(Arc::new)?;
        Ok(ids.into_iter().map(|id| (NotesOfTask(id), rows.remove(&id).unwrap_or_default())).collect())
    }
}

impl Loader<ThreadOfTask> for Loaders {
    type Value = Uuid;
    type Error = Arc<AppError>;

    async fn load(&self, keys: &[ThreadOfTask]) -> Result<HashMap<ThreadOfTask, Self::Value>, Self::Error> {
        let ids: Vec<Uuid> = keys.iter().map(|key| key.0).collect();
        let threads = batches::threads_of_tasks(&self.db, &ids).await.map_err(Arc::new)?;
        Ok(threads.into_iter().map(|(task, thread)| (ThreadOfTask(task), thread)).collect())
    }
}

impl Loader<FileOfDocument> for Loaders {
    type Value = entity::knowledge_document_file::Model;
    type Error = Arc<AppError>;

    async fn load(&self, keys: &[FileOfDocument]) -> Result<HashMap<FileOfDocument, Self::Value>, Self::Error> {
        let ids: Vec<Uuid> = keys.iter().map(|key| key.0).collect();
        let rows = batches::files_of_documents(&self.db, &ids).await.map_err(Arc::new)?;
        Ok(rows.into_iter().map(|(id, row)| (FileOfDocument(id), row)).collect())
    }
}
