use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// Where one outbox delivery stands; the seed's `research_task_outbox_status_ck` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum OutboxStatus {
    /// Written with the job, waiting for the outbox loop.
    #[sea_orm(string_value = "pending")]
    Pending,
    /// Claimed by an outbox loop that is publishing it.
    #[sea_orm(string_value = "dispatching")]
    Dispatching,
    /// Published to the queue.
    #[sea_orm(string_value = "dispatched")]
    Dispatched,
    /// A worker picked the job up.
    #[sea_orm(string_value = "leased")]
    Leased,
    /// The job reached a terminal stage after this delivery.
    #[sea_orm(string_value = "completed")]
    Completed,
    /// The job was canceled or paused before this delivery finished.
    #[sea_orm(string_value = "canceled")]
    Canceled,
    /// Publishing failed more often than allowed.
    #[sea_orm(string_value = "dead")]
    Dead,
}
