//! Permission snapshots: issuing the durable grant a task runs under, and the one place
//! that decides whether grants are still valid (`check_many`; `check` asks it about one).
//! The worker asks at every stage boundary, the API on every read.
use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use entity::{AccessChannel, MemberRole, api_key, member, permission_snapshot};
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
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

/// Why a grant no longer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantDenial {
    /// The snapshot is gone.
    Missing,
    /// The member was removed, or the membership changed since the grant.
    MembershipChanged,
    /// The API key was rotated since the grant.
    KeyRotated,
    /// The API key was revoked.
    KeyRevoked,
    /// The API key expired.
    KeyExpired,
}

impl GrantDenial {
    /// Every denial's metrics label, in declaration order.
    pub const LABELS: &[&str] = &["missing", "membershipchanged", "keyrotated", "keyrevoked", "keyexpired"];

    /// Its `research_grant_denials_total{reason}` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Missing => Self::LABELS[0],
            Self::MembershipChanged => Self::LABELS[1],
            Self::KeyRotated => Self::LABELS[2],
            Self::KeyRevoked => Self::LABELS[3],
            Self::KeyExpired => Self::LABELS[4],
        }
    }

    /// A sentence for task errors and logs.
    pub fn message(self) -> &'static str {
        match self {
            Self::Missing => "permission denied: the task's grant no longer exists",
            Self::MembershipChanged => {
                "permission denied: the membership behind the task's grant changed or was removed"
            }
            Self::KeyRotated => "permission denied: the API key behind the task's grant was rotated",
            Self::KeyRevoked => "permission denied: the API key behind the task's grant was revoked",
            Self::KeyExpired => "permission denied: the API key behind the task's grant expired",
        }
    }
}

/// Writes a permission snapshot for the request and returns it.
pub async fn issue<C: ConnectionTrait>(
    conn: &C,
    request: &GrantRequest,
    now: i64,
) -> Result<permission_snapshot::Model, DbErr> {
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
    let snapshot = permission_snapshot::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(request.tenant_id.clone()),
        knowledge_space_id: Set(request.knowledge_space_id),
        subject_id: Set(request.subject_id.clone()),
        access_channel: Set(request.access_channel),
        revision: Set(revision),
        permissions: Set(serde_json::json!(permissions)),
        issued_at: Set(now),
        api_key_id: Set(api_key_id),
        api_key_revision: Set(api_key_revision),
        api_key_expires_at: Set(api_key_expires_at),
    };
    permission_snapshot::Entity::insert(snapshot).exec_with_returning(conn).await
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

/// Whether the grant holds at `now`. One statement when it does (the rule as SQL,
/// [`holds_sql`]); only a grant that died costs the lookups that name why.
pub async fn check<C: ConnectionTrait>(conn: &C, snapshot_id: Uuid, now: i64) -> Result<Verdict, DbErr> {
    let column = "\"knowledge_space_permission_snapshots\".\"id\"";
    let holds = permission_snapshot::Entity::find_by_id(snapshot_id)
        .select_only()
        .column(permission_snapshot::Column::Id)
        .filter(holds_sql(conn.get_database_backend(), column, now))
        .into_tuple::<Uuid>()
        .one(conn)
        .await?
        .is_some();
    if holds {
        return Ok(Verdict::Holds);
    }
    explain(conn, snapshot_id, now).await
}

/// The verdict of [`check_many`] for one snapshot, with its reason when denied.
async fn explain<C: ConnectionTrait>(conn: &C, snapshot_id: Uuid, now: i64) -> Result<Verdict, DbErr> {
    let mut verdicts = check_many(conn, &[snapshot_id], now).await?;
    Ok(verdicts.remove(&snapshot_id).unwrap_or(Verdict::Denied(GrantDenial::Missing)))
}

/// Whether each grant holds at `now`, in at most three queries however many there are
/// (a page of tasks must not cost a query per row). Unknown ids answer `Missing`.
pub async fn check_many<C: ConnectionTrait>(
    conn: &C,
    snapshot_ids: &[Uuid],
    now: i64,
) -> Result<HashMap<Uuid, Verdict>, DbErr> {
    if snapshot_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let snapshots = permission_snapshot::Entity::find()
        .filter(permission_snapshot::Column::Id.is_in(snapshot_ids.iter().copied()))
        .all(conn)
        .await?;
    let key_ids: HashSet<Uuid> = snapshots.iter().filter_map(|snapshot| snapshot.api_key_id).collect();
    let keys: HashMap<Uuid, api_key::Model> = if key_ids.is_empty() {
        HashMap::new()
    } else {
        let rows = api_key::Entity::find().filter(api_key::Column::Id.is_in(key_ids)).all(conn).await?;
        rows.into_iter().map(|key| (key.id, key)).collect()
    };
    let members = memberships(conn, snapshots.iter().filter(|snapshot| snapshot.api_key_id.is_none())).await?;
    let mut verdicts: HashMap<Uuid, Verdict> =
        snapshot_ids.iter().map(|id| (*id, Verdict::Denied(GrantDenial::Missing))).collect();
    for snapshot in &snapshots {
        let verdict = match snapshot.api_key_id {
            Some(key_id) => match keys.get(&key_id) {
                Some(key) => key_denial(snapshot, key, now).map_or(Verdict::Holds, Verdict::Denied),
                None => Verdict::Denied(GrantDenial::KeyRevoked),
            },
            None => match members.get(&(
                snapshot.tenant_id.clone(),
                snapshot.knowledge_space_id,
                snapshot.subject_id.clone(),
            )) {
                Some(member) if member.removed_at.is_none() && member.revision == snapshot.revision => Verdict::Holds,
                _ => Verdict::Denied(GrantDenial::MembershipChanged),
            },
        };
        verdicts.insert(snapshot.id, verdict);
    }
    Ok(verdicts)
}

/// The membership rows behind member grants, by (tenant, space, subject).
async fn memberships<'s, C: ConnectionTrait>(
    conn: &C,
    snapshots: impl Iterator<Item = &'s permission_snapshot::Model>,
) -> Result<HashMap<(String, Uuid, String), member::Model>, DbErr> {
    let wanted: HashSet<(String, Uuid, String)> = snapshots
        .map(|snapshot| (snapshot.tenant_id.clone(), snapshot.knowledge_space_id, snapshot.subject_id.clone()))
        .collect();
    if wanted.is_empty() {
        return Ok(HashMap::new());
    }
    // Filter on each column's set and keep only the wanted triples: a page is one
    // tenant, one space and one subject, so this reads exactly the rows needed.
    let rows = member::Entity::find()
        .filter(member::Column::TenantId.is_in(wanted.iter().map(|(tenant, _, _)| tenant.clone())))
        .filter(member::Column::KnowledgeSpaceId.is_in(wanted.iter().map(|(_, space, _)| *space)))
        .filter(member::Column::SubjectId.is_in(wanted.iter().map(|(_, _, subject)| subject.clone())))
        .all(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|member| ((member.tenant_id.clone(), member.knowledge_space_id, member.subject_id.clone()), member))
        .filter(|(triple, _)| wanted.contains(triple))
        .collect())
}

/// Why a key-bound grant fails at `now`, if it does.
fn key_denial(snapshot: &permission_snapshot::Model, key: &api_key::Model, now: i64) -> Option<GrantDenial> {
    let snapshot_expired = snapshot.api_key_expires_at.is_some_and(|at| at.timestamp_millis() <= now);
    if key.revoked_at.is_some() {
        Some(GrantDenial::KeyRevoked)
    } else if Some(key.revision) != snapshot.api_key_revision {
        Some(GrantDenial::KeyRotated)
    } else if snapshot_expired || key.expires_at.is_some_and(|at| at <= now) {
        Some(GrantDenial::KeyExpired)
    } else {
        None
    }
}
