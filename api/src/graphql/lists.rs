//! The top-level lists whose rows each carry their own grant. Rows whose grant no longer
//! holds are skipped, so a page may need more than one fetch; the scan stops after
//! `MAX_SCANS` fetches to bound the work one request can cause. Each fetch checks the
//! grants of all its rows at once.
use async_graphql::connection::Connection;
use entity::{Stage, answer_trace, research_task_job as job};
use futures_util::future::BoxFuture;
use sea_orm::{DatabaseConnection, DbErr};
use uuid::Uuid;
use worker::grant;

use super::access::space_access;
use super::connection::{self, PageArgs};
use super::types::{AnswerTrace, ResearchTask};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::store::{PageKey, answer_traces, tasks};

/// The most fetches one page may take while skipping rows whose grant died.
const MAX_SCANS: usize = 20;

/// A listed row: where it sits in the list, and the grant it is shown under.
trait Granted {
    /// The cursor key (the list's order).
    fn key(&self) -> PageKey;
    /// The grant the row was written under; `None` for legacy traces, which need only the
    /// caller's access to the space (checked before the scan).
    fn snapshot_id(&self) -> Option<Uuid>;
}

impl Granted for job::Model {
    fn key(&self) -> PageKey {
        PageKey { at: self.updated_at, id: self.id }
    }
    fn snapshot_id(&self) -> Option<Uuid> {
        Some(self.permission_snapshot_id)
    }
}

impl Granted for answer_trace::Model {
    fn key(&self) -> PageKey {
        PageKey { at: self.created_at, id: self.id }
    }
    fn snapshot_id(&self) -> Option<Uuid> {
        self.permission_snapshot_id
    }
}

/// One page of the caller's visible tasks in a space, most recently updated first (the
/// seed's scope/updated index order).
pub async fn research_tasks(
    db: &DatabaseConnection,
    principal: &Principal,
    space_id: Uuid,
    stages: Option<Vec<Stage>>,
    args: PageArgs,
) -> Result<Connection<String, ResearchTask>, ApiError> {
    let (tenant, subject, limit) = (&principal.tenant_id, &principal.subject_id, args.fetch());
    let fetch = |after| -> BoxFuture<'_, Result<Vec<job::Model>, DbErr>> {
        Box::pin(tasks::page(db, tenant, space_id, subject, stages.as_deref(), after, limit))
    };
    let (kept, more) = scan(db, principal, space_id, &args, fetch).await?;
    Ok(connection::build(&args, kept, more, Granted::key, ResearchTask))
}

/// One page of the caller's visible answer traces in a space, newest first.
pub async fn answer_traces(
    db: &DatabaseConnection,
    principal: &Principal,
    space_id: Uuid,
    args: PageArgs,
) -> Result<Connection<String, AnswerTrace>, ApiError> {
    let (tenant, subject, limit) = (&principal.tenant_id, &principal.subject_id, args.fetch());
    let fetch = |after| -> BoxFuture<'_, Result<Vec<answer_trace::Model>, DbErr>> {
        Box::pin(answer_traces::page(db, tenant, space_id, subject, after, limit))
    };
    let (kept, more) = scan(db, principal, space_id, &args, fetch).await?;
    Ok(connection::build(&args, kept, more, Granted::key, AnswerTrace))
}

/// Fetches the caller's own rows after the cursor (the fetch filters by tenant, space and
/// subject) and keeps those whose grant holds, until one more than the page size is kept
/// (so the caller knows a next page exists), the rows run out, or `MAX_SCANS` fetches were
/// spent. Returns the kept rows and whether rows may remain.
async fn scan<'a, R: Granted>(
    db: &DatabaseConnection,
    principal: &Principal,
    space_id: Uuid,
    args: &PageArgs,
    fetch: impl Fn(Option<PageKey>) -> BoxFuture<'a, Result<Vec<R>, DbErr>>,
) -> Result<(Vec<R>, bool), ApiError> {
    let mut kept = Vec::new();
    // No access to the space (an API key of another space, a removed member): nothing.
    let mut exhausted = space_access(db, principal, space_id).await?.is_none();
    let mut after = args.after;
    for _ in 0..MAX_SCANS {
        if exhausted || kept.len() as u64 > args.size {
            break;
        }
        let rows = fetch(after).await?;
        exhausted = (rows.len() as u64) < args.fetch();
        after = rows.last().map(Granted::key).or(after);
        let ids: Vec<Uuid> = rows.iter().filter_map(Granted::snapshot_id).collect();
        let verdicts = grant::check_many(db, &ids).await?;
        let holds = |row: &R| row.snapshot_id().is_none_or(|id| verdicts.get(&id).is_some_and(Result::is_ok));
        kept.extend(rows.into_iter().filter(holds));
    }
    // Rows past one more than the page only tell that a next page exists.
    let more = !exhausted || kept.len() as u64 > args.size;
    kept.truncate(usize::try_from(args.size).unwrap_or(usize::MAX).saturating_add(1));
    Ok((kept, more))
}
