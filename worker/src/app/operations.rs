//! What operators (`KFS_OPERATOR_SUBJECTS`) read and do on the operations page: the
//! service's state at a glance, and making a dead outbox row pending again.
use uuid::Uuid;

use super::audit::{self, Actor, action};
use super::{App, AppError, Principal};

pub use crate::store::ops::Snapshot;

/// The service's state now (stages, waits, the outbox, the oldest queued task), for an
/// operator whose credential has not expired (a stream asks again at every snapshot, so
/// it ends when the credential does).
pub async fn snapshot(app: &App, caller: &Principal) -> Result<Snapshot, AppError> {
    let now = entity::now_millis();
    if !app.rules.is_operator(caller) {
        return Err(AppError::Forbidden);
    }
    if caller.expires_at.is_some_and(|at| now >= at) {
        return Err(AppError::Unauthenticated);
    }
    Ok(crate::store::ops::snapshot(&app.db, now).await?)
}

/// Makes the dead outbox row `id` pending again, recording it in the operator's tenant's
/// audit log; false when there is no such dead row. Operators only (FORBIDDEN otherwise).
pub async fn redeliver_outbox(app: &App, actor: Actor<'_>, id: Uuid) -> Result<bool, AppError> {
    if !app.rules.is_operator(actor.principal) {
        return Err(AppError::Forbidden);
    }
    let now = entity::now_millis();
    let entry = audit::Entry {
        tenant_id: &actor.principal.tenant_id,
        knowledge_space_id: None,
        action: action::OUTBOX_REDELIVERED,
        target_type: "research_task_outbox",
        target_id: Some(id.to_string()),
        details: serde_json::json!({}),
    };
    Ok(crate::lifecycle::redeliver_outbox(&app.db, &app.notifier, id, now, audit::row(actor, entry, now)).await?)
}
