//! Knowledge spaces and their members: created by people, managed by owners, and seen
//! by a caller only as far as its membership (or API key) reaches.
use entity::{MemberRole, knowledge_space as space, member};
use sea_orm::DatabaseTransaction;
use serde_json::{Value, json};
use uuid::Uuid;

use super::access::{require_role, space_access};
use super::audit::{self, Actor, action};
use super::limits::{self, MAX_NAME_CHARS};
use super::writes::{begin, begin_creating};
use super::{App, AppError, Principal};
use crate::store::{members, spaces};

/// The spaces `caller` may research in (at most `limit`), each with the caller's role
/// there (`None` for an API key, which has none).
pub async fn visible(
    app: &App,
    caller: &Principal,
    limit: u64,
) -> Result<Vec<(space::Model, Option<MemberRole>)>, AppError> {
    let db = &app.db;
    if let Some(key) = &caller.api_key {
        let space = spaces::find(db, &caller.tenant_id, key.knowledge_space_id).await?;
        return Ok(space.map(|space| (space, None)).into_iter().collect());
    }
    let mut visible = Vec::new();
    for space in spaces::page_for_member(db, &caller.tenant_id, &caller.subject_id, None, limit).await? {
        let role = space_access(db, caller, space.id).await?.and_then(|access| access.role());
        visible.push((space, role));
    }
    Ok(visible)
}

/// Creates a space; the caller becomes its owner. People only: API keys are refused.
pub async fn create(app: &App, actor: Actor<'_>, name: &str) -> Result<space::Model, AppError> {
    let caller = actor.principal;
    if caller.api_key.is_some() {
        return Err(AppError::Forbidden);
    }
    limits::text("name", name, MAX_NAME_CHARS)?;
    let txn = begin_creating(&app.db, &caller.tenant_id).await?;
    let (space, _) = spaces::create(&txn, &caller.tenant_id, name, &caller.subject_id).await?;
    let entry = audit::Entry {
        tenant_id: &space.tenant_id,
        knowledge_space_id: Some(space.id),
        action: action::SPACE_CREATED,
        target_type: "knowledge_space",
        target_id: Some(space.id.to_string()),
        details: json!({}),
    };
    audit::record(&txn, actor, entry, space.created_at).await?;
    txn.commit().await?;
    Ok(space)
}

/// Adds a member, re-adds a removed one, or changes a member's role. Owners only; a space
/// keeps at least one owner. A role change bumps the membership's revision, which ends the
/// grants issued under the old one.
pub async fn add_member(
    app: &App,
    actor: Actor<'_>,
    space_id: Uuid,
    subject_id: &str,
    role: MemberRole,
) -> Result<member::Model, AppError> {
    let caller = actor.principal;
    limits::text("subjectId", subject_id, MAX_NAME_CHARS)?;
    require_role(&app.db, caller, space_id, MemberRole::can_manage).await?;
    let txn = begin_creating(&app.db, &caller.tenant_id).await?;
    let current = members::find_active(&txn, &caller.tenant_id, space_id, subject_id).await?;
    if current.as_ref().is_some_and(|member| member.role == MemberRole::Owner) && role != MemberRole::Owner {
        keep_an_owner(&txn, &caller.tenant_id, space_id).await?;
    }
    let member = members::upsert(&txn, &caller.tenant_id, space_id, subject_id, role).await?;
    let (action, details) = match current {
        Some(before) => {
            (action::MEMBER_CHANGED, json!({ "from": before.role, "to": member.role, "revision": member.revision }))
        }
        None => (action::MEMBER_ADDED, json!({ "role": member.role, "revision": member.revision })),
    };
    audit::record(&txn, actor, member_entry(&member, action, details), member.updated_at).await?;
    txn.commit().await?;
    Ok(member)
}

/// Removes a member, which ends every grant their tasks run under. Owners only. False when
/// the subject was not a member.
pub async fn remove_member(app: &App, actor: Actor<'_>, space_id: Uuid, subject_id: &str) -> Result<bool, AppError> {
    let caller = actor.principal;
    limits::text("subjectId", subject_id, MAX_NAME_CHARS)?;
    require_role(&app.db, caller, space_id, MemberRole::can_manage).await?;
    let txn = begin(&app.db).await?;
    let Some(member) = members::find_active(&txn, &caller.tenant_id, space_id, subject_id).await? else {
        return Ok(false);
    };
    if member.role == MemberRole::Owner {
        keep_an_owner(&txn, &caller.tenant_id, space_id).await?;
    }
    let removed = members::remove(&txn, member).await?;
    let details = json!({ "role": removed.role, "revision": removed.revision });
    audit::record(&txn, actor, member_entry(&removed, action::MEMBER_REMOVED, details), removed.updated_at).await?;
    txn.commit().await?;
    Ok(true)
}

/// Refuses a change that would leave the space without an owner.
async fn keep_an_owner(txn: &DatabaseTransaction, tenant_id: &str, space_id: Uuid) -> Result<(), AppError> {
    if members::count_owners(txn, tenant_id, space_id).await? <= 1 {
        return Err(AppError::conflict("a knowledge space must keep at least one owner"));
    }
    Ok(())
}

/// The audit entry of an action on a membership; the target is the member's subject.
fn member_entry<'a>(member: &'a member::Model, action: &'static str, details: Value) -> audit::Entry<'a> {
    audit::Entry {
        tenant_id: &member.tenant_id,
        knowledge_space_id: Some(member.knowledge_space_id),
        action,
        target_type: "member",
        target_id: Some(member.subject_id.clone()),
        details,
    }
}
