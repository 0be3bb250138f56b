//! Mutations on API keys (`worker::app::keys`). Owners only; the secret is returned once,
//! in `CreatedApiKey`.
use async_graphql::{Context, Object};
use uuid::Uuid;
use worker::app::keys::{self, KeyRequest};

use crate::error::IntoGql;
use crate::graphql::context::{actor, state};
use crate::graphql::types::{ApiKey, CreateApiKeyInput, CreatedApiKey};

/// API key mutations.
#[derive(Default)]
pub struct KeyMutation;

#[Object]
impl KeyMutation {
    /// Mints a key bound to one space.
    async fn create_api_key(
        &self,
        ctx: &Context<'_>,
        input: CreateApiKeyInput,
    ) -> async_graphql::Result<CreatedApiKey> {
        let run = async {
            let request = KeyRequest {
                knowledge_space_id: input.knowledge_space_id,
                name: input.name,
                expires_at: input.expires_at,
            };
            let minted = keys::create(&state(ctx)?.app, actor(ctx)?, request).await?;
            Ok(CreatedApiKey::new(minted.key, &minted.secret))
        };
        run.await.gql()
    }

    /// Replaces the key's secret and bumps its revision: the old secret stops working and
    /// tasks created under it lose their grant.
    async fn rotate_api_key(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<CreatedApiKey> {
        let run = async {
            let state = state(ctx)?;
            let rotated = keys::rotate(&state.app, actor(ctx)?, id).await?;
            // Grants of the old revision just died: followed tasks re-check now, not at
            // their next poll. (Other processes notice at theirs.)
            state.live.recheck_grants();
            Ok(CreatedApiKey::new(rotated.key, &rotated.secret))
        };
        run.await.gql()
    }

    /// Revokes the key for good; revoking twice keeps the first revocation time.
    async fn revoke_api_key(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<ApiKey> {
        let run = async {
            let state = state(ctx)?;
            let key = keys::revoke(&state.app, actor(ctx)?, id).await?;
            state.live.recheck_grants();
            Ok(ApiKey(key))
        };
        run.await.gql()
    }
}
