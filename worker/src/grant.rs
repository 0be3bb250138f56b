//! Permission snapshots: issuing the durable grant a task runs under, and the one function
//! that decides whether a grant is still valid (the worker asks at every stage boundary,
//! the API on every read).
use chrono::{DateTime, Utc};
use entity::{
    AccessChannel, MemberRole, api_key, member, now_millis, permission_snapshot,
};
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};
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
    /// A sentence for task errors and logs.
    pub fn message(self) -> &'static str {
        match self {
            Self::Missing => "permission denied: the task's grant no longer exists",
            Self::MembershipChanged => "permission denied: the membership behind the task's grant changed or was removed",
            Self::KeyRotated => "permission denied: the API key behind the task's grant was rotated",
            Self::KeyRevoked => "permission denied: the API key behind the task's grant was revoked",
            Self::KeyExpired => "permission denied: the API key behind the task's grant expired",
        }
    }
}

/// Writes a permission snapshot for the request and returns it.
pub async fn issue<C: ConnectionTrait>(conn: &C, request: &GrantRequest) -> Result<permission_snapshot::Model, DbErr> {
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
        issued_at: Set(now_millis()),
        api_key_id: Set(api_key_id),
        api_key_revision: Set(api_key_revision),
        api_key_expires_at: Set(api_key_expires_at),
    };
    permission_snapshot::Entity::insert(snapshot).exec_with_returning(conn).await
}

/// Whether the grant still holds now. The one place that decides it.
pub async fn check<C: ConnectionTrait>(conn: &C, snapshot_id: Uuid) -> Result<Result<(), GrantDenial>, DbErr> {
    let Some(snapshot) = permission_snapshot::Entity::find_by_id(snapshot_id).one(conn).await? else {
        return Ok(Err(GrantDenial::Missing));
    };
    let now = now_millis();
    if let Some(key_id) = snapshot.api_key_id {
        let Some(key) = api_key::Entity::find_by_id(key_id).one(conn).await? else {
            return Ok(Err(GrantDenial::KeyRevoked));
        };
        return Ok(key_denial(&snapshot, &key, now).map_or(Ok(()), Err));
    }
    let membership = member::Entity::find()
        .filter(member::Column::TenantId.eq(&snapshot.tenant_id))
        .filter(member::Column::KnowledgeSpaceId.eq(snapshot.knowledge_space_id))
        .filter(member::Column::SubjectId.eq(&snapshot.subject_id))
        .one(conn)
        .await?;
    Ok(match membership {
        Some(member) if member.removed_at.is_none() && member.revision == snapshot.revision => Ok(()),
        _ => Err(GrantDenial::MembershipChanged),
    })
}

/// Why a key-bound grant fails at `now`, if it does.
fn key_denial(snapshot: &permission_snapshot::Model, key: &api_key::Model, now: i64) -> Option<GrantDenial> {
    let snapshot_expired = snapshot
        .api_key_expires_at
        .is_some_and(|at| at.timestamp_millis() <= now);
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
