//! The answer draft: what the worker holding the lease has written of the answer so far,
//! rewritten at a bounded rate while generation runs and read by `researchTaskAnswer`
//! subscribers in every process. Each write is fenced by the lease like every other worker
//! write; completion sets the draft to the stored answer in the boundary's own
//! transaction (`store::boundaries`).
use entity::Stage;

use super::commit::commit;
use super::{Lease, LifecycleError};
use crate::notify::{Notifier, TaskSignal};
use crate::store::{self, begin_write};

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
    let current = store::tasks::lock(&txn, lease.job_id).await?;
    let Some(current) = current.filter(|row| row.lease_token == Some(lease.token) && row.stage == Stage::Generating)
    else {
        return Err(LifecycleError::LeaseLost);
    };
    let generation = match generation {
        Some(generation) => generation,
        None => store::drafts::find(&txn, lease.job_id).await?.map_or(1, |draft| draft.generation + 1),
    };
    store::drafts::upsert(&txn, store::drafts::row(&current.tenant_id, lease.job_id, generation, text, now)).await?;
    commit(txn, notifier, vec![TaskSignal::by_lease_holder(lease.job_id)]).await?;
    Ok(generation)
}
