//! Deleting what users ask to delete: their own tasks and answer traces, spaces they
//! own, and (operators, for data-protection requests) a whole tenant. Each is recorded in
//! the audit log; after it, nothing of what went is readable, retrievable as evidence,
//! streamed or delivered by webhook.
use async_graphql::{Context, Object};
use uuid::Uuid;
use worker::app::deletes;

use crate::error::IntoGql;
use crate::graphql::context::{actor, state};
use crate::graphql::types::ErasedCounts;

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
        let run = async { deletes::task(&state(ctx)?.app, actor(ctx)?, id).await.map(|()| true) };
        run.await.gql()
    }

    /// Deletes one of the caller's answer traces and every copy of its answer (the answer a
    /// live `researchTaskAnswer` streams included). Anyone else's id answers NOT_FOUND.
    async fn delete_answer_trace(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<bool> {
        let run = async { deletes::answer_trace(&state(ctx)?.app, actor(ctx)?, id).await.map(|()| true) };
        run.await.gql()
    }

    /// Deletes a space the caller owns and everything in it: tasks (running ones stop),
    /// answer traces, documents and their passages, grants, members, API keys (they stop
    /// working at once), webhook endpoints. Access ends first, in one transaction; the
    /// rows then go in small batches, and a worker finishes the job should this request
    /// be interrupted. Answers what was removed.
    async fn delete_knowledge_space(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<ErasedCounts> {
        let run = async {
            let state = state(ctx)?;
            // Every grant in the space dies with its access: its followed tasks end now,
            // here, and at their next poll elsewhere (their rows going ends them too).
            let erased = deletes::space(&state.app, actor(ctx)?, id, || state.live.recheck_grants()).await?;
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
            let state = state(ctx)?;
            // Every grant of the tenant dies with the seal: its followed tasks end now, here,
            // and at their next poll elsewhere.
            let (erased, audit_events) =
                deletes::tenant(&state.app, actor(ctx)?, &tenant_id, || state.live.recheck_grants()).await?;
            Ok(ErasedCounts::new(erased, audit_events))
        };
        run.await.gql()
    }
}
