//! The top-level lists whose rows each carry their own grant. Rows whose grant no longer
//! holds are skipped, so a page may need more than one fetch; the scan stops after
//! `MAX_SCANS` fetches to bound the work one request can cause.
use async_graphql::connection::Connection;
use entity::{Stage, answer_trace, research_task_job as job};
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use super::access::{self, space_access};
use super::connection::{self, PageArgs};
use super::types::{AnswerTrace, ResearchTask};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::store::{PageKey, answer_traces, tasks};

/// The most fetches one page may take while skipping rows whose grant died.
const MAX_SCANS: usize = 20;

/// The cursor key of a task: the seed's scope/updated index order.
fn task_key(task: &job::Model) -> PageKey {
    PageKey { at: task.updated_at, id: task.id }
}

/// The cursor key of a trace: newest first.
fn trace_key(trace: &answer_trace::Model) -> PageKey {
    PageKey { at: trace.created_at, id: trace.id }
}

/// One page of the caller's visible tasks in a space, most recently updated first.
pub async fn research_tasks(
    db: &DatabaseConnection,
    principal: &Principal,
    space_id: Uuid,
    stages: Option<Vec<Stage>>,
    args: PageArgs,
) -> Result<Connection<String, ResearchTask>, ApiError> {
    let mut kept = Vec::new();
    let mut exhausted = space_access(db, principal, space_id).await?.is_none();
    let mut after = args.after;
    for _ in 0..MAX_SCANS {
        if exhausted || kept.len() as u64 > args.size {
            break;
        }
        let (tenant, subject) = (&principal.tenant_id, &principal.subject_id);
        let rows = tasks::page(db, tenant, space_id, subject, stages.as_deref(), after, args.fetch()).await?;
        exhausted = (rows.len() as u64) < args.fetch();
        for row in rows {
            after = Some(task_key(&row));
            if access::task_is_visible(db, principal, &row).await? {
                kept.push(row);
            }
            if kept.len() as u64 > args.size {
                break;
            }
        }
    }
    Ok(connection::build(&args, kept, !exhausted, task_key, ResearchTask))
}

/// One page of the caller's visible answer traces in a space, newest first.
pub async fn answer_traces(
    db: &DatabaseConnection,
    principal: &Principal,
    space_id: Uuid,
    args: PageArgs,
) -> Result<Connection<String, AnswerTrace>, ApiError> {
    let mut kept = Vec::new();
    let mut exhausted = space_access(db, principal, space_id).await?.is_none();
    let mut after = args.after;
    for _ in 0..MAX_SCANS {
        if exhausted || kept.len() as u64 > args.size {
            break;
        }
        let (tenant, subject) = (&principal.tenant_id, &principal.subject_id);
        let rows = answer_traces::page(db, tenant, space_id, subject, after, args.fetch()).await?;
        exhausted = (rows.len() as u64) < args.fetch();
        for row in rows {
            after = Some(trace_key(&row));
            if access::trace_is_visible(db, principal, &row).await? {
                kept.push(row);
            }
            if kept.len() as u64 > args.size {
                break;
            }
        }
    }
    Ok(connection::build(&args, kept, !exhausted, trace_key, AnswerTrace))
}
