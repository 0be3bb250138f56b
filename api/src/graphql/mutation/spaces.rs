//! Mutations on spaces and their members (`worker::app::spaces`).
use async_graphql::{Context, Object};
use entity::MemberRole;
use uuid::Uuid;
use worker::app::spaces;

use crate::error::IntoGql;
use crate::graphql::context::{actor, state};
use crate::graphql::types::{
    AddKnowledgeSpaceMemberInput, CreateKnowledgeSpaceInput, KnowledgeSpace, KnowledgeSpaceMember,
};

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
            let space = spaces::create(&state(ctx)?.app, actor(ctx)?, &input.name).await?;
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
            let state = state(ctx)?;
            let role = MemberRole::from(input.role);
            let member =
                spaces::add_member(&state.app, actor(ctx)?, input.knowledge_space_id, &input.subject_id, role).await?;
            // A role change bumps the membership revision, which ends the grants issued
            // under the old one: followed tasks re-check now.
            state.live.recheck_grants();
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
            let state = state(ctx)?;
            let removed = spaces::remove_member(&state.app, actor(ctx)?, knowledge_space_id, &subject_id).await?;
            if removed {
                // The member's grants just died: followed tasks re-check now.
                state.live.recheck_grants();
            }
            Ok(removed)
        };
        run.await.gql()
    }
}
