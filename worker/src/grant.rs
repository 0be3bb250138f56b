//! Permission snapshots: issuing the durable grant a task runs under, and the one place
//! that decides whether grants are still valid (`check_many`; `check` asks it about one).
//! The worker asks at every stage boundary, the API on every read.
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use entity::{AccessChannel, MemberRole, permission_snapshot};
use sea_orm::{ConnectionTrait, DbErr};
use uuid::Uuid;

/// Where a grant comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum GrantSource {
    /// A member of the space, at the membership's current revision.
    Member {
        /// The membership revision.
        revision: i32,
        /// The member's role.
        role: MemberRole,
    },
    /// A service API key, at its current revision and expiry.
    ApiKey {
        /// The key's id.
        key_id: Uuid,
        /// The key's revision.
        revision: i32,
        /// The key's expiry, epoch milliseconds.
        expires_at: Option<i64>,
    },
}

/// Who is being granted what.
#[derive(Debug, Clone)]
pub struct GrantRequest {
    /// The space's tenant.
    pub tenant_id: String,
    /// The space.
    pub knowledge_space_id: Uuid,
    /// The holder.
    pub subject_id: String,
    /// How the holder reached the service.
    pub access_channel: AccessChannel,
    /// The credential behind the grant.
    pub source: GrantSource,
}

pub use entity::GrantDenial;

/// The permission snapshot that grants `request` now (`id` decided by the caller).
pub fn snapshot_of(id: Uuid, request: &GrantRequest, now: i64) -> permission_snapshot::Model {
    let (revision, permissions, api_key_id, api_key_revision, api_key_expires_at) = match &request.source {
        GrantSource::Member { revision, role } => (*revision, role.permissions(), None, None, None),
        GrantSource::ApiKey { key_id, revision, expires_at } => (
            *revision,
            vec!["research.run", "research.read"],
            Some(*key_id),
            Some(*revision),
            expires_at.and_then(DateTime::<Utc>::from_timestamp_millis).map(|at| at.fixed_offset()),
        ),
    };
    permission_snapshot::Model {
        id,
        tenant_id: request.tenant_id.clone(),
        knowledge_space_id: request.knowledge_space_id,
        subject_id: request.subject_id.clone(),
        access_channel: request.access_channel,
        revision,
        permissions: serde_json::json!(permissions),
        issued_at: now,
        api_key_id,
        api_key_revision,
        api_key_expires_at,
    }
}

/// Whether a grant holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It holds: the task may run and be read.
    Holds,
    /// It no longer holds, for this reason.
    Denied(GrantDenial),
}

impl Verdict {
    /// Whether the grant holds.
    pub fn holds(self) -> bool {
        self == Self::Holds
    }
}

/// The rule of [`check_many`] as one SQL condition, for reads that fetch a row and the
/// validity of its grant in one statement: true when the snapshot that `snapshot_column`
/// (a qualified column, `"research_task_jobs"."permission_snapshot_id"`) names still
/// holds at `now`. A member's grant holds while that membership is current at the
/// snapshot's revision; a key's while the key is unrevoked, at the snapshot's revision,
/// and neither the key nor the snapshot has expired. `grant_sql_agrees_with_check` (e2e)
/// holds the two versions to the same verdicts.
pub fn holds_sql(backend: sea_orm::DatabaseBackend, snapshot_column: &str, now: i64) -> sea_orm::sea_query::Expr {
    // sea-query's custom expressions take `$n` on PostgreSQL (where `?` is an operator)
    // and `?` elsewhere.
    let sql = match backend {
        sea_orm::DatabaseBackend::Postgres => holds_condition(backend, snapshot_column, "$1", "$2"),
        _ => holds_condition(backend, snapshot_column, "?", "?"),
    };
    sea_orm::sea_query::Expr::cust_with_values(sql, [now, now])
}

/// [`holds_sql`]'s rule as SQL text in which "now" (epoch milliseconds) is the expression
/// `now_sql`, such as a column of a statement that checks many grants at once, each at its
/// own time.
pub fn holds_at(backend: sea_orm::DatabaseBackend, snapshot_column: &str, now_sql: &str) -> String {
    holds_condition(backend, snapshot_column, now_sql, now_sql)
}

/// The rule's text; the key's and the snapshot's expiry each compare with their own
/// reading of "now" (two placeholders, or one expression twice).
fn holds_condition(
    backend: sea_orm::DatabaseBackend,
    snapshot_column: &str,
    key_now: &str,
    snapshot_now: &str,
) -> String {
    let snapshot_expiry_passed = match backend {
        sea_orm::DatabaseBackend::Postgres => {
            format!("\"gs\".\"api_key_expires_at\" > to_timestamp(CAST({snapshot_now} AS double precision) / 1000)")
        }
        _ => format!("unixepoch(\"gs\".\"api_key_expires_at\", 'subsec') * 1000 > {snapshot_now}"),
    };
    format!(
        "EXISTS (SELECT 1 FROM \"knowledge_space_permission_snapshots\" AS \"gs\" WHERE \"gs\".\"id\" = {snapshot_column} AND (\
         (\"gs\".\"api_key_id\" IS NULL AND EXISTS (SELECT 1 FROM \"knowledge_space_members\" AS \"gm\" \
           WHERE \"gm\".\"tenant_id\" = \"gs\".\"tenant_id\" AND \"gm\".\"knowledge_space_id\" = \"gs\".\"knowledge_space_id\" \
           AND \"gm\".\"subject_id\" = \"gs\".\"subject_id\" AND \"gm\".\"removed_at\" IS NULL AND \"gm\".\"revision\" = \"gs\".\"revision\")) \
         OR (\"gs\".\"api_key_id\" IS NOT NULL AND EXISTS (SELECT 1 FROM \"knowledge_space_api_keys\" AS \"gk\" \
           WHERE \"gk\".\"id\" = \"gs\".\"api_key_id\" AND \"gk\".\"revoked_at\" IS NULL AND \"gk\".\"revision\" = \"gs\".\"api_key_revision\" \
           AND (\"gk\".\"expires_at\" IS NULL OR \"gk\".\"expires_at\" > {key_now})) \
           AND (\"gs\".\"api_key_expires_at\" IS NULL OR {snapshot_expiry_passed}))))"
    )
}

/// Whether the grant holds at `now` (the grant rule, in the store).
pub async fn check<C: ConnectionTrait>(conn: &C, snapshot_id: Uuid, now: i64) -> Result<Verdict, DbErr> {
    Ok(crate::store::grants::verdict(conn, snapshot_id, now).await?.map_or(Verdict::Holds, Verdict::Denied))
}

/// Whether each grant holds at `now`, in one statement however many there are (a page of
/// tasks must not cost a query per row). Unknown ids answer `Missing`.
pub async fn check_many<C: ConnectionTrait>(
    conn: &C,
    snapshot_ids: &[Uuid],
    now: i64,
) -> Result<HashMap<Uuid, Verdict>, DbErr> {
    let verdicts = crate::store::grants::verdicts(conn, snapshot_ids, now).await?;
    Ok(verdicts.into_iter().map(|(id, denial)| (id, denial.map_or(Verdict::Holds, Verdict::Denied))).collect())
}
