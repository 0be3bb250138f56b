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
