//! Mutations on spaces and their members.
use async_graphql::{Context, Object};
use entity::{MemberRole, member};
use serde_json::{Value, json};
use uuid::Uuid;
use worker::store::begin_write;

use super::creating::begin_creating;
use crate::audit::{self, action};
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::{actor, principal, state};
use crate::graphql::types::{
    AddKnowledgeSpaceMemberInput, CreateKnowledgeSpaceInput, KnowledgeSpace, KnowledgeSpaceMember,
};
use worker::app::access::require_role;
use worker::app::limits::{self, MAX_NAME_CHARS};
use worker::store::{members, spaces};

/// Space and member mutations.
#[derive(Default)]
pub struct SpaceMutation;

#[Object]
impl SpaceMutation {
    /// Creates a space; the caller becomes its owner. People only: API keys are refused.
    async fn create_knowledge_space(
        &self,
        ctx: &Context<'_>,
        input: CreateKnowledgeSpaceInput,
    ) -> async_graphql::Result<KnowledgeSpace> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            if caller.api_key.is_some() {
                return Err(ApiError::Forbidden);
            }
            limits::text("name", &input.name, MAX_NAME_CHARS)?;
            let txn = begin_creating(db, &caller.tenant_id).await?;
            let (space, _) = spaces::create(&txn, &caller.tenant_id, &input.name, &caller.subject_id).await?;
            let entry = audit::Entry {
                tenant_id: &space.tenant_id,
                knowledge_space_id: Some(space.id),
                action: action::SPACE_CREATED,
                target_type: "knowledge_space",
                target_id: Some(space.id.to_string()),
                details: json!({}),
            };
            audit::record(&txn, actor(ctx)?, entry, space.created_at).await?;
            txn.commit().await?;
            Ok(KnowledgeSpace { space, viewer_role: Some(MemberRole::Owner) })
        };
        run.await.gql()
    }

    /// Adds a member, re-adds a removed one, or changes a member's role. Owners only.
    async fn add_knowledge_space_member(
        &self,
        ctx: &Context<'_>,
        input: AddKnowledgeSpaceMemberInput,
    ) -> async_graphql::Result<KnowledgeSpaceMember> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            limits::text("subjectId", &input.subject_id, MAX_NAME_CHARS)?;
            let space_id = input.knowledge_space_id;
            require_role(db, caller, space_id, MemberRole::can_manage).await?;
            let role = MemberRole::from(input.role);
            let txn = begin_creating(db, &caller.tenant_id).await?;
            let current = members::find_active(&txn, &caller.tenant_id, space_id, &input.subject_id).await?;
            if current.as_ref().is_some_and(|member| member.role == MemberRole::Owner) && role != MemberRole::Owner {
                keep_an_owner(&txn, &caller.tenant_id, space_id).await?;
            }
            let member = members::upsert(&txn, &caller.tenant_id, space_id, &input.subject_id, role).await?;
            let (action, details) = match current {
                Some(before) => (
                    action::MEMBER_CHANGED,
                    json!({ "from": before.role, "to": member.role, "revision": member.revision }),
                ),
                None => (action::MEMBER_ADDED, json!({ "role": member.role, "revision": member.revision })),
            };
            audit::record(&txn, actor(ctx)?, member_entry(&member, action, details), member.updated_at).await?;
            txn.commit().await?;
            // A role change bumps the membership revision, which ends the grants issued
            // under the old one: followed tasks re-check now.
            state(ctx)?.live.recheck_grants();
            Ok(KnowledgeSpaceMember(member))
        };
        run.await.gql()
    }

    /// Removes a member, which ends every grant their tasks run under. Owners only.
    /// False when the subject was not a member.
    async fn remove_knowledge_space_member(
        &self,
        ctx: &Context<'_>,
        knowledge_space_id: Uuid,
        subject_id: String,
    ) -> async_graphql::Result<bool> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            limits::text("subjectId", &subject_id, MAX_NAME_CHARS)?;
            require_role(db, caller, knowledge_space_id, MemberRole::can_manage).await?;
            let txn = begin_write(db).await?;
            let Some(member) = members::find_active(&txn, &caller.tenant_id, knowledge_space_id, &subject_id).await?
            else {
                return Ok(false);
            };
            if member.role == MemberRole::Owner {
                keep_an_owner(&txn, &caller.tenant_id, knowledge_space_id).await?;
            }
            let removed = members::remove(&txn, member).await?;
            let details = json!({ "role": removed.role, "revision": removed.revision });
            audit::record(
                &txn,
                actor(ctx)?,
                member_entry(&removed, action::MEMBER_REMOVED, details),
                removed.updated_at,
            )
            .await?;
            txn.commit().await?;
            // The member's grants just died: followed tasks re-check now.
            state(ctx)?.live.recheck_grants();
            Ok(true)
        };
        run.await.gql()
    }
}

/// Refuses a change that would leave the space without an owner.
async fn keep_an_owner(txn: &sea_orm::DatabaseTransaction, tenant_id: &str, space_id: Uuid) -> Result<(), ApiError> {
    if members::count_owners(txn, tenant_id, space_id).await? <= 1 {
        return Err(ApiError::conflict("a knowledge space must keep at least one owner"));
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
