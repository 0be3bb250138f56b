use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// The kind of a progress event; the seed's `research_task_progress_event_ck` values.
/// Completion is a `StageChanged` event whose stage is `completed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(64))")]
pub enum ProgressEventType {
    /// The first claim of the task.
    #[sea_orm(string_value = "research_task.started")]
    Started,
    /// Every later stage boundary, completion included.
    #[sea_orm(string_value = "research_task.stage_changed")]
    StageChanged,
    /// The task was paused.
    #[sea_orm(string_value = "research_task.paused")]
    Paused,
    /// The task was resumed.
    #[sea_orm(string_value = "research_task.resumed")]
    Resumed,
    /// The task was canceled.
    #[sea_orm(string_value = "research_task.canceled")]
    Canceled,
    /// The task failed for good.
    #[sea_orm(string_value = "research_task.failed")]
    Failed,
}
