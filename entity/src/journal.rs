//! A task's two journals, progress events and partial results: per-job tables numbered
//! 1, 2, 3… with no gaps. One trait names their columns, so a read or an append is written
//! once for both (the worker's store holds those statements).
use sea_orm::EntityTrait;
use sea_orm::prelude::Uuid;

use crate::tables::{research_task_partial_result as partial, research_task_progress_event as progress};

/// A per-job journal table.
pub trait Journal: EntityTrait {
    /// The job column.
    const JOB: Self::Column;
    /// The idempotency-key column.
    const KEY: Self::Column;
    /// The sequence column.
    const SEQUENCE: Self::Column;
    /// A row's sequence: 1, 2, 3… per job, with no gaps.
    fn sequence(row: &Self::Model) -> i32;
    /// The job a row belongs to.
    fn job(row: &Self::Model) -> Uuid;
}

impl Journal for progress::Entity {
    const JOB: progress::Column = progress::Column::ResearchTaskJobId;
    const KEY: progress::Column = progress::Column::IdempotencyKey;
    const SEQUENCE: progress::Column = progress::Column::Sequence;
    fn sequence(row: &progress::Model) -> i32 {
        row.sequence
    }
    fn job(row: &progress::Model) -> Uuid {
        row.research_task_job_id
    }
}

impl Journal for partial::Entity {
    const JOB: partial::Column = partial::Column::ResearchTaskJobId;
    const KEY: partial::Column = partial::Column::IdempotencyKey;
    const SEQUENCE: partial::Column = partial::Column::Sequence;
    fn sequence(row: &partial::Model) -> i32 {
        row.sequence
    }
    fn job(row: &partial::Model) -> Uuid {
        row.research_task_job_id
    }
}
