//! Deleting what users ask to delete: their own tasks and answer traces, spaces they own,
//! and (operators, for data-protection requests) a whole tenant. Each is recorded in the
//! audit log; after it, nothing of what went is readable, retrievable as evidence,
//! streamed or delivered by webhook.
use entity::MemberRole;
use serde_json::json;
use uuid::Uuid;

use super::access::{require_role, visible_task, visible_trace};
use super::audit::{self, Actor, action};
use super::limits::{self, MAX_NAME_CHARS};
use super::writes::begin;
use super::{App, AppError};
use crate::lifecycle;
pub use crate::lifecycle::Erased;
use crate::store::spaces;

/// Deletes one of the caller's tasks with everything it wrote. A running task stops: its
/// worker's next write finds the task gone. Anyone else's id answers NOT_FOUND.
pub async fn task(app: &App, actor: Actor<'_>, id: Uuid) -> Result<(), AppError> {
    let task = visible_task(&app.db, actor.principal, id).await?.ok_or(AppError::NotFound)?;
    let entry = audit::Entry {
        tenant_id: &task.tenant_id,
        knowledge_space_id: Some(task.knowledge_space_id),
        action: action::TASK_DELETED,
        target_type: "research_task",
        target_id: Some(id.to_string()),
        details: json!({ "stage": task.stage }),
    };
    let record = audit::row(actor, entry, entity::now_millis());
    if !lifecycle::delete_task(&app.db, &app.notifier, id, record).await? {
        return Err(AppError::NotFound);
    }
    Ok(())
}

/// Deletes one of the caller's answer traces and every copy of its answer. Anyone else's
/// id answers NOT_FOUND.
pub async fn answer_trace(app: &App, actor: Actor<'_>, id: Uuid) -> Result<(), AppError> {
    let trace = visible_trace(&app.db, actor.principal, id).await?.ok_or(AppError::NotFound)?;
    let entry = audit::Entry {
        tenant_id: &trace.tenant_id,
        knowledge_space_id: Some(trace.knowledge_space_id),
        action: action::TRACE_DELETED,
        target_type: "answer_trace",
        target_id: Some(id.to_string()),
        details: json!({}),
    };
    let record = audit::row(actor, entry, entity::now_millis());
    if !lifecycle::delete_answer_trace(&app.db, &app.notifier, id, record).await? {
        return Err(AppError::NotFound);
    }
    Ok(())
}

/// Deletes a space the caller owns and everything in it. Access ends first, in one
/// transaction (then `access_ended` runs, so followers can re-check at once); the rows then
/// go in small batches, and a worker finishes the job should this call be interrupted.
/// Answers what was removed.
pub async fn space(app: &App, actor: Actor<'_>, id: Uuid, access_ended: impl FnOnce()) -> Result<Erased, AppError> {
    let caller = actor.principal;
    require_role(&app.db, caller, id, MemberRole::can_manage).await?;
    let space = spaces::find(&app.db, &caller.tenant_id, id).await?.ok_or(AppError::NotFound)?;
    let now = entity::now_millis();
    let txn = begin(&app.db).await?;
    lifecycle::begin_space_deletion(&txn, &space.tenant_id, id, &caller.subject_id, now).await?;
    let entry = audit::Entry {
        tenant_id: &space.tenant_id,
        knowledge_space_id: Some(id),
        action: action::SPACE_DELETED,
        target_type: "knowledge_space",
        target_id: Some(id.to_string()),
        details: json!({ "name": space.name }),
    };
    audit::record(&txn, actor, entry, now).await?;
    txn.commit().await?;
    access_ended();
    Ok(lifecycle::finish_space_deletion(&app.db, &app.notifier, &space.tenant_id, id).await?)
}

/// Operators only: removes every row of `tenant_id`, its audit events included, for a
/// data-protection request; answers what was removed and how many audit events. The
/// tenant is sealed first (then `access_ended` runs): from then on nothing of it is
/// readable, and nothing new is accepted for it until the erasure completes. The erasure is
/// recorded in the operator's own tenant's log.
pub async fn tenant(
    app: &App,
    actor: Actor<'_>,
    tenant_id: &str,
    access_ended: impl FnOnce(),
) -> Result<(Erased, u64), AppError> {
    let caller = actor.principal;
    if !app.rules.is_operator(caller) {
        return Err(AppError::Forbidden);
    }
    limits::text("tenantId", tenant_id, MAX_NAME_CHARS)?;
    lifecycle::seal_tenant(&app.db, tenant_id, &caller.subject_id, entity::now_millis()).await?;
    access_ended();
    let (erased, audit_events) = lifecycle::finish_tenant_erasure(&app.db, &app.notifier, tenant_id).await?;
    let entry = audit::Entry {
        tenant_id: &caller.tenant_id,
        knowledge_space_id: None,
        action: action::TENANT_ERASED,
        target_type: "tenant",
        target_id: Some(tenant_id.to_owned()),
        details: serde_json::to_value(erased).unwrap_or_default(),
    };
    audit::record(&app.db, actor, entry, entity::now_millis()).await?;
    Ok((erased, audit_events))
}
