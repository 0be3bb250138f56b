//! The answer draft: what the worker holding the lease has written of the answer so far,
//! rewritten at a bounded rate while generation runs and read by `researchTaskAnswer`
//! subscribers in every process. Each write is fenced by the lease like every other worker
//! write; completion sets the draft to the stored answer in its own transaction
//! ([`finish_in`]).
use entity::{Stage, research_task_answer_draft as draft};
use sea_orm::{
    ActiveValue::Set,
    ConnectionTrait, DatabaseTransaction, EntityTrait,
    sea_query::{Expr, OnConflict},
};
use uuid::Uuid;

use super::row::{commit_as_lease_holder, lock_leased, signal};
use super::{Lease, LifecycleError};
use crate::db::begin_write;
use crate::notify::Notifier;

/// Writes `text` as the task's draft answer in `generation`, or (`None`) in a new
/// generation after the current one, and returns the generation written. Only the holder
/// of the lease may write, and only while the task is generating.
pub async fn write_answer_draft(
    db: &sea_orm::DatabaseConnection,
    notifier: &Notifier,
    lease: &Lease,
    text: &str,
    generation: Option<i32>,
    now: i64,
) -> Result<i32, LifecycleError> {
    let txn = begin_write(db).await?;
    let current = lock_leased(&txn, lease).await?;
    if current.stage != Stage::Generating {
        return Err(LifecycleError::LeaseLost);
    }
    let generation = match generation {
        Some(generation) => generation,
        None => next_generation(&txn, lease.job_id).await?,
    };
    upsert(&txn, &current.tenant_id, lease.job_id, generation, text, now).await?;
    let mut signal = signal(lease.job_id, None, None, false);
    signal.answer_draft = true;
    commit_as_lease_holder(txn, notifier, signal).await?;
    Ok(generation)
}

/// Inside the completing transaction: the draft becomes `answer`. It stays in its
/// generation when what it held is the start of the answer (subscribers then only receive
/// the rest), and moves to the next one otherwise (they start over). One upsert: the
/// comparison with the draft it replaces is made by the database, in code points on both
/// backends (`substr` and `length` count characters), as Rust's `starts_with` would.
pub(super) async fn finish_in(
    txn: &DatabaseTransaction,
    tenant_id: &str,
    job_id: Uuid,
    answer: &str,
    now: i64,
) -> Result<(), LifecycleError> {
    let kept_or_next = Expr::cust(
        "CASE WHEN substr(\"excluded\".\"answer\", 1, length(\"research_task_answer_drafts\".\"answer\")) \
         = \"research_task_answer_drafts\".\"answer\" THEN \"research_task_answer_drafts\".\"generation\" \
         ELSE \"research_task_answer_drafts\".\"generation\" + 1 END",
    );
    let on_conflict = OnConflict::column(draft::Column::ResearchTaskJobId)
        .value(draft::Column::Generation, kept_or_next)
        .update_columns([draft::Column::Answer, draft::Column::CharCount, draft::Column::UpdatedAt])
        .to_owned();
    draft::Entity::insert(row(tenant_id, job_id, 1, answer, now))
        .on_conflict(on_conflict)
        .exec_without_returning(txn)
        .await?;
    Ok(())
}

async fn next_generation<C: ConnectionTrait>(txn: &C, job_id: Uuid) -> Result<i32, LifecycleError> {
    let existing = draft::Entity::find_by_id(job_id).one(txn).await?;
    Ok(existing.map_or(1, |row| row.generation + 1))
}

async fn upsert<C: ConnectionTrait>(
    txn: &C,
    tenant_id: &str,
    job_id: Uuid,
    generation: i32,
    text: &str,
    now: i64,
) -> Result<(), LifecycleError> {
    let on_conflict = OnConflict::column(draft::Column::ResearchTaskJobId)
        .update_columns([
            draft::Column::Generation,
            draft::Column::Answer,
            draft::Column::CharCount,
            draft::Column::UpdatedAt,
        ])
        .to_owned();
    draft::Entity::insert(row(tenant_id, job_id, generation, text, now))
        .on_conflict(on_conflict)
        .exec_without_returning(txn)
        .await?;
    Ok(())
}

/// The draft row for `text` in `generation`.
fn row(tenant_id: &str, job_id: Uuid, generation: i32, text: &str, now: i64) -> draft::ActiveModel {
    draft::ActiveModel {
        research_task_job_id: Set(job_id),
        tenant_id: Set(tenant_id.to_owned()),
        generation: Set(generation),
        answer: Set(text.to_owned()),
        char_count: Set(i32::try_from(text.chars().count()).unwrap_or(i32::MAX)),
        updated_at: Set(now),
    }
}
