//! Deleting what users ask to delete: their own tasks and answer traces, spaces they
//! own, and (operators, for data-protection requests) a whole tenant. Each is recorded in
//! the audit log; after it, nothing of what went is readable, retrievable as evidence,
//! streamed or delivered by webhook.
use async_graphql::{Context, Object};
use entity::MemberRole;
use serde_json::json;
use uuid::Uuid;
use worker::lifecycle;
use worker::store::begin_write;

use crate::audit::{self, action};
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::{actor, principal, state};
use crate::graphql::types::ErasedCounts;
use worker::app::access::{require_role, visible_task, visible_trace};
use worker::app::limits::{self, MAX_NAME_CHARS};
use worker::store::spaces;

/// Deleting mutations.
#[derive(Default)]
pub struct DeleteMutation;

#[Object]
impl DeleteMutation {
    /// Deletes one of the caller's tasks with everything it wrote (progress events,
    /// partial results, its answer and answer traces, webhook deliveries). A running task
    /// stops: its worker's next write finds the task gone and writes nothing. Live
    /// subscriptions to it complete. Anyone else's id answers NOT_FOUND.
    async fn delete_research_task(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<bool> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let task = visible_task(&app.db, caller, id).await?.ok_or(ApiError::NotFound)?;
            let entry = audit::Entry {
                tenant_id: &task.tenant_id,
                knowledge_space_id: Some(task.knowledge_space_id),
                action: action::TASK_DELETED,
                target_type: "research_task",
                target_id: Some(id.to_string()),
                details: json!({ "stage": task.stage }),
            };
            let record = audit::row(actor(ctx)?, entry, entity::now_millis());
            if !lifecycle::delete_task(&app.db, &app.notifier, id, record).await? {
                return Err(ApiError::NotFound);
            }
            Ok(true)
        };
        run.await.gql()
    }

    /// Deletes one of the caller's answer traces and every copy of its answer (the answer a
    /// live `researchTaskAnswer` streams included). Anyone else's id answers NOT_FOUND.
    async fn delete_answer_trace(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<bool> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let trace = visible_trace(&app.db, caller, id).await?.ok_or(ApiError::NotFound)?;
            let entry = audit::Entry {
                tenant_id: &trace.tenant_id,
                knowledge_space_id: Some(trace.knowledge_space_id),
                action: action::TRACE_DELETED,
                target_type: "answer_trace",
                target_id: Some(id.to_string()),
                details: json!({}),
            };
            let record = audit::row(actor(ctx)?, entry, entity::now_millis());
            if !lifecycle::delete_answer_trace(&app.db, &app.notifier, id, record).await? {
                return Err(ApiError::NotFound);
            }
            Ok(true)
        };
        run.await.gql()
    }

    /// Deletes a space the caller owns and everything in it: tasks (running ones stop),
    /// answer traces, documents and their passages, grants, members, API keys (they stop
    /// working at once), webhook endpoints. Access ends first, in one transaction; the
    /// rows then go in small batches, and a worker finishes the job should this request
    /// be interrupted. Answers what was removed.
    async fn delete_knowledge_space(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<ErasedCounts> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            require_role(&app.db, caller, id, MemberRole::can_manage).await?;
            let space = spaces::find(&app.db, &caller.tenant_id, id).await?.ok_or(ApiError::NotFound)?;
            let now = entity::now_millis();
            let txn = begin_write(&app.db).await?;
            lifecycle::begin_space_deletion(&txn, &space.tenant_id, id, &caller.subject_id, now).await?;
            let entry = audit::Entry {
                tenant_id: &space.tenant_id,
                knowledge_space_id: Some(id),
                action: action::SPACE_DELETED,
                target_type: "knowledge_space",
                target_id: Some(id.to_string()),
                details: json!({ "name": space.name }),
            };
            audit::record(&txn, actor(ctx)?, entry, now).await?;
            txn.commit().await?;
            // Every grant in the space just died: its followed tasks end now, here, and
            // at their next poll elsewhere (their rows going ends them too).
            app.live.recheck_grants();
            let erased = lifecycle::finish_space_deletion(&app.db, &app.notifier, &space.tenant_id, id).await?;
            Ok(ErasedCounts::new(erased, 0))
        };
        run.await.gql()
    }

    /// Operators only (`KFS_OPERATOR_SUBJECTS`): removes every row of a tenant, its audit
    /// events included, for a data-protection request; answers the counts. The tenant is
    /// sealed first, in one transaction: from then on nothing of it is readable, and
    /// every request that would create something for it (a space, member, key, document,
    /// task or webhook endpoint) answers CONFLICT until the erasure completes. A worker
    /// finishes an erasure this request could not. The erasure itself is recorded in the
    /// operator's own tenant's log.
    async fn erase_tenant(&self, ctx: &Context<'_>, tenant_id: String) -> async_graphql::Result<ErasedCounts> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            if !app.is_operator(caller) {
                return Err(ApiError::Forbidden);
            }
            limits::text("tenantId", &tenant_id, MAX_NAME_CHARS)?;
            lifecycle::seal_tenant(&app.db, &tenant_id, &caller.subject_id, entity::now_millis()).await?;
            // Every grant of the tenant just died: its followed tasks end now, here, and at
            // their next poll elsewhere.
            app.live.recheck_grants();
            let (erased, audit_events) = lifecycle::finish_tenant_erasure(&app.db, &app.notifier, &tenant_id).await?;
            let counts = ErasedCounts::new(erased, audit_events);
            let entry = audit::Entry {
                tenant_id: &caller.tenant_id,
                knowledge_space_id: None,
                action: action::TENANT_ERASED,
                target_type: "tenant",
                target_id: Some(tenant_id.clone()),
                details: serde_json::to_value(erased).unwrap_or_default(),
            };
            audit::record(&app.db, actor(ctx)?, entry, entity::now_millis()).await?;
            Ok(counts)
        };
        run.await.gql()
    }
}
