//! `ResearchTaskNote`: guidance a person added to a task (`steerResearchTask`).
use async_graphql::Object;
use chrono::{DateTime, Utc};
use entity::research_task_note as note;

use super::datetime;

/// A steering note, readable by whoever may read its task.
pub struct ResearchTaskNote(pub note::Model);

/// A steering note, readable by whoever may read its task.
#[Object]
impl ResearchTaskNote {
    /// What it says.
    async fn text(&self) -> &str {
        &self.0.text
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
}
