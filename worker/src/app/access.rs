//! Who may see and do what. Tasks, their journals and answer traces belong to the subject
//! that created them, in its tenant and space, and only while the grant they were created
//! under holds; anything else answers exactly as a missing id does.
use entity::{MemberRole, answer_trace, member, research_task_job as job};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use uuid::Uuid;

use super::error::AppError;
use super::principal::{ApiKeyCredential, Principal};
use crate::grant;
use crate::store::{answer_traces, members, spaces, tasks};

/// The caller's standing in one space.
#[derive(Debug, Clone)]
pub enum SpaceAccess {
    /// A current member, with the membership row (role and revision).
    Member(member::Model),
    /// A service client whose API key is bound to this space.
    ApiKey(ApiKeyCredential),
}

impl SpaceAccess {
    /// The member's role; API keys have none.
    pub fn role(&self) -> Option<MemberRole> {
        match self {
            Self::Member(membership) => Some(membership.role),
            Self::ApiKey(_) => None,
        }
    }
}

/// How the caller stands in the space, or `None` when the space is not visible to them.
pub async fn space_access<C: ConnectionTrait>(
    db: &C,
    principal: &Principal,
    space_id: Uuid,
) -> Result<Option<SpaceAccess>, AppError> {
    if let Some(key) = &principal.api_key {
        if key.knowledge_space_id != space_id {
            return Ok(None);
        }
        let exists = spaces::find(db, &principal.tenant_id, space_id).await?.is_some();
        return Ok(exists.then(|| SpaceAccess::ApiKey(key.clone())));
    }
    let membership = members::find_active(db, &principal.tenant_id, space_id, &principal.subject_id).await?;
    Ok(membership.map(SpaceAccess::Member))
}

/// The caller's membership if its role allows `allowed`: `NOT_FOUND` when the space is not
/// visible, `FORBIDDEN` when it is but the role (or an API key) does not suffice.
pub async fn require_role<C: ConnectionTrait>(
    db: &C,
    principal: &Principal,
    space_id: Uuid,
    allowed: fn(MemberRole) -> bool,
) -> Result<member::Model, AppError> {
    match space_access(db, principal, space_id).await? {
        None => Err(AppError::NotFound),
        Some(SpaceAccess::Member(membership)) if allowed(membership.role) => Ok(membership),
        Some(_) => Err(AppError::Forbidden),
    }
}

/// Whether the grant behind a row still holds.
async fn grant_holds(db: &DatabaseConnection, snapshot_id: Uuid) -> Result<bool, AppError> {
    Ok(grant::check(db, snapshot_id, entity::now_millis()).await?.holds())
}

/// Whether an API key principal may look into this space (everyone else: any space).
fn key_allows(principal: &Principal, space_id: Uuid) -> bool {
    principal.api_key.as_ref().is_none_or(|key| key.knowledge_space_id == space_id)
}

/// The task, if the caller may see it.
pub async fn visible_task(
    db: &DatabaseConnection,
    principal: &Principal,
    id: Uuid,
) -> Result<Option<job::Model>, AppError> {
    // One statement: the row, and whether the grant it was created under still holds.
    let now = entity::now_millis();
    let found = tasks::find_readable(db, &principal.tenant_id, &principal.subject_id, id, now).await?;
    Ok(found.filter(|task| key_allows(principal, task.knowledge_space_id)))
}

/// Whether the caller may see this trace. A trace without a grant (written before grants
/// were recorded) needs the caller's current access to its space instead.
pub async fn trace_is_visible(
    db: &DatabaseConnection,
    principal: &Principal,
    trace: &answer_trace::Model,
) -> Result<bool, AppError> {
    let owned = trace.tenant_id == principal.tenant_id
        && trace.subject_id.as_deref() == Some(principal.subject_id.as_str())
        && key_allows(principal, trace.knowledge_space_id);
    if !owned {
        return Ok(false);
    }
    match trace.permission_snapshot_id {
        Some(snapshot_id) => grant_holds(db, snapshot_id).await,
        None => Ok(space_access(db, principal, trace.knowledge_space_id).await?.is_some()),
    }
}

/// The trace, if the caller may see it. Legacy traces (no subject) never match.
pub async fn visible_trace(
    db: &DatabaseConnection,
    principal: &Principal,
    id: Uuid,
) -> Result<Option<answer_trace::Model>, AppError> {
    let Some(trace) = answer_traces::find_owned(db, &principal.tenant_id, &principal.subject_id, id).await? else {
        return Ok(None);
    };
    Ok(trace_is_visible(db, principal, &trace).await?.then_some(trace))
}

/// The caller's own webhook endpoint, if it still may research in the endpoint's space
/// now; anyone else's (or an owner who lost the space) answers as missing.
pub async fn owned_endpoint(
    db: &DatabaseConnection,
    principal: &Principal,
    id: Uuid,
) -> Result<entity::webhook_endpoint::Model, AppError> {
    let endpoint = crate::store::webhooks::find_owned(db, &principal.tenant_id, &principal.subject_id, id)
        .await?
        .ok_or(AppError::NotFound)?;
    space_access(db, principal, endpoint.knowledge_space_id).await?.ok_or(AppError::NotFound)?;
    Ok(endpoint)
}
