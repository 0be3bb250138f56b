//! The top-level lists whose rows each carry their own grant. Tasks are filtered by their
//! grant in the page query itself. Traces whose grant no longer holds are skipped, so a
//! page may need more than one fetch; the scan stops after
//! `MAX_SCANS` fetches to bound the work one request can cause. Each fetch checks the
//! grants of all its rows at once.
use std::collections::HashMap;

use entity::{Stage, answer_trace, research_task_job as job, webhook_delivery};
use sea_orm::{DatabaseConnection, DbErr};
use uuid::Uuid;

use super::access::{owned_endpoint, space_access};
use super::{App, AppError, Principal};
use crate::grant::{self, Verdict};
pub use crate::store::pages::PageKey;
use crate::store::{answer_traces, tasks};

/// One page of a list: how many rows, and after which (a list is ordered by `(time, id)`).
#[derive(Debug, Clone, Copy)]
pub struct Page {
    /// How many rows to show.
    pub size: u64,
    /// Where the previous page ended.
    pub after: Option<PageKey>,
}

impl Page {
    /// The rows to fetch: one more than the page, to learn whether another page follows.
    pub fn fetch(&self) -> u64 {
        self.size + 1
    }
}

/// A page's rows (up to one more than the page) and whether rows past them may remain
/// although no extra one was kept (a scan that stopped early).
#[derive(Debug, Clone)]
pub struct Listed<R> {
    /// The rows, in the list's order.
    pub rows: Vec<R>,
    /// Whether more may follow beyond what the rows show.
    pub maybe_more: bool,
}

impl<R> Listed<R> {
    fn all(rows: Vec<R>) -> Self {
        Self { rows, maybe_more: false }
    }
}

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

impl Granted for answer_trace::Model {
    fn key(&self) -> PageKey {
        PageKey { at: self.created_at, id: self.id }
    }
    fn snapshot_id(&self) -> Option<Uuid> {
        self.permission_snapshot_id
    }
}

/// One page of the caller's visible tasks in a space, most recently updated first (the
/// seed's scope/updated index order), optionally only those in `stages`.
pub async fn research_tasks(
    app: &App,
    principal: &Principal,
    space_id: Uuid,
    stages: Option<Vec<Stage>>,
    page: Page,
) -> Result<Listed<job::Model>, AppError> {
    let db = &app.db;
    // The page query keeps only rows whose grant holds, so one fetch fills the page.
    if space_access(db, principal, space_id).await?.is_none() {
        return Ok(Listed::all(Vec::new()));
    }
    let (tenant, subject) = (&principal.tenant_id, &principal.subject_id);
    let now = entity::now_millis();
    let rows = tasks::page(db, tenant, space_id, subject, stages.as_deref(), page.after, page.fetch(), now).await?;
    Ok(Listed::all(rows))
}

/// Where a task sits in [`research_tasks`]'s order.
pub fn task_key(task: &job::Model) -> PageKey {
    PageKey { at: task.updated_at, id: task.id }
}

/// One page of the caller's visible answer traces in a space, newest first.
pub async fn answer_traces(
    app: &App,
    principal: &Principal,
    space_id: Uuid,
    page: Page,
) -> Result<Listed<answer_trace::Model>, AppError> {
    let db = &app.db;
    let (tenant, subject, limit) = (&principal.tenant_id, &principal.subject_id, page.fetch());
    let fetch = |after| -> BoxFuture<'_, Result<Vec<answer_trace::Model>, DbErr>> {
        Box::pin(answer_traces::page(db, tenant, space_id, subject, after, limit))
    };
    let (rows, maybe_more) = scan_visible(db, principal, space_id, &page, fetch).await?;
    Ok(Listed { rows, maybe_more })
}

/// Where a trace sits in [`answer_traces`]'s order.
pub fn trace_key(trace: &answer_trace::Model) -> PageKey {
    Granted::key(trace)
}

/// One page of the caller's own endpoint's deliveries, newest first; anyone else's
/// endpoint answers NOT_FOUND.
pub async fn webhook_deliveries(
    app: &App,
    principal: &Principal,
    endpoint_id: Uuid,
    page: Page,
) -> Result<Listed<webhook_delivery::Model>, AppError> {
    owned_endpoint(&app.db, principal, endpoint_id).await?;
    let rows = crate::store::webhooks::deliveries(&app.db, endpoint_id, page.after, page.fetch()).await?;
    Ok(Listed::all(rows))
}

/// Where a delivery sits in [`webhook_deliveries`]'s order.
pub fn delivery_key(delivery: &webhook_delivery::Model) -> PageKey {
    PageKey { at: delivery.created_at, id: delivery.id }
}

/// One page of the spaces the caller may research in, newest first, each with the
/// caller's role (an API key sees exactly its one space: a list of at most one, still
/// paged by cursor).
pub async fn knowledge_spaces(
    app: &App,
    principal: &Principal,
    page: Page,
) -> Result<Listed<(entity::knowledge_space::Model, Option<entity::MemberRole>)>, AppError> {
    let db = &app.db;
    let mut rows = Vec::new();
    if let Some(api_key) = &principal.api_key {
        let found = crate::store::spaces::find(db, &principal.tenant_id, api_key.knowledge_space_id).await?;
        rows.extend(found.map(|space| (space, None)));
        rows.retain(|(space, _)| page.after.is_none_or(|after| (space.created_at, space.id) < (after.at, after.id)));
    } else {
        let (tenant, subject) = (&principal.tenant_id, &principal.subject_id);
        for space in crate::store::spaces::page_for_member(db, tenant, subject, page.after, page.fetch()).await? {
            let access = space_access(db, principal, space.id).await?;
            rows.push((space, access.and_then(|access| access.role())));
        }
    }
    Ok(Listed::all(rows))
}

/// Where a space sits in [`knowledge_spaces`]'s order.
pub fn space_key(space: &entity::knowledge_space::Model) -> PageKey {
    PageKey { at: space.created_at, id: space.id }
}

/// One page of the audit log, newest first. Owners read their space's (`space`);
/// operators read everyone's, optionally of one tenant or space. A space the caller does
/// not own answers NOT_FOUND (FORBIDDEN for its other members).
pub async fn audit_events(
    app: &App,
    principal: &Principal,
    space: Option<Uuid>,
    tenant: Option<String>,
    page: Page,
) -> Result<Listed<entity::audit_event::Model>, AppError> {
    if let Some(tenant) = &tenant {
        super::limits::text("tenantId", tenant, super::limits::MAX_NAME_CHARS)?;
    }
    let (tenant, space) = if app.rules.is_operator(principal) {
        (tenant, space)
    } else {
        if tenant.is_some() {
            return Err(AppError::bad_input("tenantId is for operators; owners name their knowledgeSpaceId"));
        }
        let space =
            space.ok_or_else(|| AppError::bad_input("knowledgeSpaceId is required (the space whose log to read)"))?;
        super::access::require_role(&app.db, principal, space, entity::MemberRole::can_manage).await?;
        (Some(principal.tenant_id.clone()), Some(space))
    };
    let rows = crate::store::audit::page(&app.db, tenant.as_deref(), space, page.after, page.fetch()).await?;
    Ok(Listed::all(rows))
}

/// Where an audit event sits in [`audit_events`]'s order.
pub fn audit_key(event: &entity::audit_event::Model) -> PageKey {
    PageKey { at: event.created_at, id: event.id }
}

/// [`scan`] of the caller's own rows in a space, with the grants checked in the database
/// now; nothing at all when the caller has no access to the space (an API key of another
/// space, a removed member).
async fn scan_visible<'a, R: Granted>(
    db: &'a DatabaseConnection,
    principal: &Principal,
    space_id: Uuid,
    args: &Page,
    fetch: impl FnMut(Option<PageKey>) -> BoxFuture<'a, Result<Vec<R>, DbErr>>,
) -> Result<(Vec<R>, bool), AppError> {
    if space_access(db, principal, space_id).await?.is_none() {
        return Ok((Vec::new(), false));
    }
    let check = |ids: Vec<Uuid>| -> BoxFuture<'a, Result<HashMap<Uuid, Verdict>, DbErr>> {
        Box::pin(async move { grant::check_many(db, &ids, entity::now_millis()).await })
    };
    Ok(scan(args, fetch, check).await?)
}

/// A boxed future borrowing for `'a`.
type BoxFuture<'a, T> = futures_util::future::BoxFuture<'a, T>;

/// Fetches rows after the cursor (the caller's own: the fetch filters by tenant, space and
/// subject) and keeps those whose grant holds, until one more than the page size is kept
/// (so the caller knows a next page exists), the rows run out, or `MAX_SCANS` fetches were
/// spent. Each fetch's grants are checked at once. Returns the kept rows and whether rows
/// may remain.
async fn scan<'a, R: Granted>(
    args: &Page,
    mut fetch: impl FnMut(Option<PageKey>) -> BoxFuture<'a, Result<Vec<R>, DbErr>>,
    mut check: impl FnMut(Vec<Uuid>) -> BoxFuture<'a, Result<HashMap<Uuid, Verdict>, DbErr>>,
) -> Result<(Vec<R>, bool), DbErr> {
    let mut kept = Vec::new();
    let mut exhausted = false;
    let mut after = args.after;
    for _ in 0..MAX_SCANS {
        if exhausted || kept.len() as u64 > args.size {
            break;
        }
        let rows = fetch(after).await?;
        exhausted = (rows.len() as u64) < args.fetch();
        after = rows.last().map(Granted::key).or(after);
        let verdicts = check(rows.iter().filter_map(Granted::snapshot_id).collect()).await?;
        let holds = |row: &R| row.snapshot_id().is_none_or(|id| verdicts.get(&id).is_some_and(|v| v.holds()));
        kept.extend(rows.into_iter().filter(holds));
    }
    // Rows past one more than the page only tell that a next page exists.
    let more = !exhausted || kept.len() as u64 > args.size;
    kept.truncate(usize::try_from(args.size).unwrap_or(usize::MAX).saturating_add(1));
    Ok((kept, more))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listed row for the tests: its position and whether its grant holds.
    #[derive(Debug, Clone, PartialEq)]
    struct Row {
        at: i64,
        grant: Uuid,
        live: bool,
    }

    impl Granted for Row {
        fn key(&self) -> PageKey {
            PageKey { at: self.at, id: self.grant }
        }
        fn snapshot_id(&self) -> Option<Uuid> {
            Some(self.grant)
        }
    }

    /// Rows newest first at times `n..0`, live where `live(i)` says.
    fn rows(n: i64, live: impl Fn(i64) -> bool) -> Vec<Row> {
        (0..n).rev().map(|at| Row { at, grant: Uuid::from_u128(at as u128 + 1), live: live(at) }).collect()
    }

    /// Scans `all` in pages of `size`, counting fetches.
    fn run(all: &[Row], size: u64, after: Option<PageKey>) -> (Vec<i64>, bool, usize) {
        let args = Page { size, after };
        let fetches = std::cell::Cell::new(0);
        let fetch = |after: Option<PageKey>| -> BoxFuture<'_, Result<Vec<Row>, DbErr>> {
            fetches.set(fetches.get() + 1);
            let start = after.map_or(0, |key| all.iter().position(|row| row.at == key.at).map_or(all.len(), |i| i + 1));
            let page = all[start..].iter().take(args.fetch() as usize).cloned().collect();
            Box::pin(std::future::ready(Ok(page)))
        };
        let verdicts: HashMap<Uuid, Verdict> = all
            .iter()
            .map(|row| {
                (row.grant, if row.live { Verdict::Holds } else { Verdict::Denied(grant::GrantDenial::Missing) })
            })
            .collect();
        let check = |ids: Vec<Uuid>| -> BoxFuture<'_, Result<HashMap<Uuid, Verdict>, DbErr>> {
            Box::pin(std::future::ready(Ok(ids.iter().map(|id| (*id, verdicts[id])).collect())))
        };
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a test runtime");
        let (kept, more) = runtime.block_on(scan(&args, fetch, check)).expect("the fakes do not fail");
        (kept.iter().map(|row| row.at).collect(), more, fetches.get())
    }

    #[test]
    fn dead_rows_are_skipped_and_the_page_still_fills() {
        let all = rows(10, |at| at % 2 == 0);
        let (kept, more, _) = run(&all, 2, None);
        // One more than the page is kept, to tell that another page follows.
        assert_eq!(kept, vec![8, 6, 4]);
        assert!(more);
    }

    #[test]
    fn the_last_page_says_nothing_follows() {
        let all = rows(3, |_| true);
        let (kept, more, fetches) = run(&all, 5, None);
        assert_eq!((kept, more, fetches), (vec![2, 1, 0], false, 1));
    }

    #[test]
    fn a_run_of_dead_rows_is_walked_past_up_to_the_scan_limit() {
        let all = rows(200, |at| at < 2);
        let (kept, more, fetches) = run(&all, 2, None);
        assert!(kept.is_empty(), "{kept:?}");
        assert_eq!(fetches, MAX_SCANS);
        assert!(more, "rows may remain past the scan limit");
    }

    #[test]
    fn the_cursor_starts_after_the_given_row() {
        let all = rows(6, |_| true);
        let (kept, _, _) = run(&all, 2, Some(PageKey { at: 4, id: Uuid::from_u128(5) }));
        assert_eq!(kept, vec![3, 2, 1]);
    }
}
