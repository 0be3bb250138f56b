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

/// The space `id` with the caller's role there, if the caller may see it.
pub async fn find(
    app: &App,
    caller: &Principal,
    id: Uuid,
) -> Result<Option<(space::Model, Option<MemberRole>)>, AppError> {
    let Some(access) = space_access(&app.db, caller, id).await? else {
        return Ok(None);
    };
    Ok(spaces::find(&app.db, &caller.tenant_id, id).await?.map(|space| (space, access.role())))
}

/// A space as a caller was shown it (by [`find`] or a list): the row and the caller's role
/// there (none for an API key). What the space holds is read through it.
#[derive(Clone, Copy)]
pub struct Shown<'a> {
    /// The space.
    pub space: &'a space::Model,
    /// The caller's role there.
    pub role: Option<MemberRole>,
}

impl Shown<'_> {
    /// FORBIDDEN unless the caller manages the space.
    fn require_owner(&self) -> Result<(), AppError> {
        match self.role {
            Some(role) if role.can_manage() => Ok(()),
            _ => Err(AppError::Forbidden),
        }
    }
}

/// The space's current members. Owners only.
pub async fn members(app: &App, shown: Shown<'_>) -> Result<Vec<member::Model>, AppError> {
    shown.require_owner()?;
    Ok(members::list_active(&app.db, &shown.space.tenant_id, shown.space.id).await?)
}

/// The space's API keys, revoked ones included. Owners only.
pub async fn api_keys(app: &App, shown: Shown<'_>) -> Result<Vec<entity::api_key::Model>, AppError> {
    shown.require_owner()?;
    Ok(crate::store::api_keys::list_for_space(&app.db, &shown.space.tenant_id, shown.space.id).await?)
}

/// The caller's own webhook endpoints in the space, oldest first.
pub async fn webhook_endpoints(
    app: &App,
    caller: &Principal,
    shown: Shown<'_>,
) -> Result<Vec<entity::webhook_endpoint::Model>, AppError> {
    let (tenant, subject) = (&caller.tenant_id, &caller.subject_id);
    Ok(crate::store::webhooks::list_owned(&app.db, tenant, shown.space.id, subject).await?)
}

/// One page of the space's documents, newest first.
pub async fn documents(
    app: &App,
    shown: Shown<'_>,
    page: super::lists::Page,
) -> Result<super::lists::Listed<entity::knowledge_document::Model>, AppError> {
    let (tenant, space) = (&shown.space.tenant_id, shown.space.id);
    let rows = crate::store::documents::page(&app.db, tenant, space, page.after, page.fetch()).await?;
    Ok(super::lists::Listed { rows, maybe_more: false })
}

/// Where a document sits in [`documents`]'s order.
pub fn document_key(document: &entity::knowledge_document::Model) -> super::lists::PageKey {
    super::lists::PageKey { at: document.created_at, id: document.id }
}
