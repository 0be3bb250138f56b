//! The retrieval port as the pipeline fills it: a task's passages searched in the database
//! (full text, or hybrid with an embeddings endpoint), among the documents its filters
//! allow.
use entity::{TaskLimits, research_task_job as job};
use sea_orm::DatabaseConnection;

use crate::knowledge::retrieve::Retriever;
use crate::knowledge::search::{Found, Scope};
use crate::research::engine::{BoxError, PassageSearch, async_trait};

/// A space's passages in the database, searched with a retriever.
pub(super) struct Library<'a> {
    /// The database.
    pub db: &'a DatabaseConnection,
    /// How passages are ranked.
    pub retriever: &'a Retriever,
}

#[async_trait]
impl PassageSearch for Library<'_> {
    fn rankers(&self) -> i64 {
        if self.retriever.is_hybrid() { 2 } else { 1 }
    }

    async fn search(&self, task: &job::Model, queries: &[String], limit: u64) -> Result<Vec<Vec<Found>>, BoxError> {
        let (tenant_id, knowledge_space_id) = (&task.tenant_id, task.knowledge_space_id);
        // A task's filters are resolved to the space's matching documents once per round.
        let allowed = match TaskLimits::from_stored(&task.limits).filters {
            Some(filters) => {
                Some(crate::store::filtered::matching(self.db, tenant_id, knowledge_space_id, &filters).await?)
            }
            None => None,
        };
        let scope = Scope { tenant_id, knowledge_space_id, documents: allowed.as_deref() };
        Ok(self.retriever.search_many(self.db, scope, queries, limit).await?)
    }

    fn support_threshold(&self) -> Option<f64> {
        self.retriever.support_threshold()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Ok(self.retriever.embed(texts).await?)
    }
}
