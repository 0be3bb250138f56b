//! A task's two journals, progress events and partial results: per-job tables keyed by
//! `(job, sequence)` and `(job, idempotency key)`. One trait names their columns, and the
//! reads every journal needs live here once, for the lifecycle (which alone appends, in
//! `lifecycle::journal`), the API's lists and the live subscriptions alike.
use entity::{research_task_partial_result as partial, research_task_progress_event as progress};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

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

/// Up to `limit` rows of the job with a sequence greater than `after`, in order.
pub async fn after<J: Journal, C: ConnectionTrait>(
    conn: &C,
    job_id: Uuid,
    after: i32,
    limit: u64,
) -> Result<Vec<J::Model>, DbErr> {
    J::find()
        .filter(J::JOB.eq(job_id))
        .filter(J::SEQUENCE.gt(after))
        .order_by_asc(J::SEQUENCE)
        .limit(limit)
        .all(conn)
        .await
}

/// For each of `job_ids`, its rows with a sequence greater than `after`, at most `limit`,
/// in order: one statement for many jobs (a list of tasks with their journals). Sequences
/// have no gaps, so "the next `limit` rows" is the sequence range `after+1 ..= after+limit`
/// and needs no per-job window.
pub async fn after_many<J: Journal, C: ConnectionTrait>(
    conn: &C,
    job_ids: &[Uuid],
    after: i32,
    limit: u64,
) -> Result<Vec<J::Model>, DbErr> {
    if job_ids.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let last = after.saturating_add(i32::try_from(limit).unwrap_or(i32::MAX));
    J::find()
        .filter(J::JOB.is_in(job_ids.iter().copied()))
        .filter(J::SEQUENCE.gt(after))
        .filter(J::SEQUENCE.lte(last))
        .order_by_asc(J::JOB)
        .order_by_asc(J::SEQUENCE)
        .all(conn)
        .await
}

/// The job's highest sequence so far (0 for none).
pub async fn last_sequence<J: Journal, C: ConnectionTrait>(conn: &C, job_id: Uuid) -> Result<i32, DbErr> {
    let last: Option<i32> = J::find()
        .select_only()
        .column(J::SEQUENCE)
        .filter(J::JOB.eq(job_id))
        .order_by_desc(J::SEQUENCE)
        .into_tuple()
        .one(conn)
        .await?;
    Ok(last.unwrap_or(0))
}

/// The sequence of the job's row with this idempotency key, if one was written.
pub async fn sequence_of_key<J: Journal, C: ConnectionTrait>(
    conn: &C,
    job_id: Uuid,
    key: &str,
) -> Result<Option<i32>, DbErr> {
    J::find()
        .select_only()
        .column(J::SEQUENCE)
        .filter(J::JOB.eq(job_id))
        .filter(J::KEY.eq(key))
        .into_tuple()
        .one(conn)
        .await
}
