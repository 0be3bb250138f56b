//! Mutations on API keys. Owners only; the secret is returned once, in `CreatedApiKey`.
use async_graphql::{Context, Object};
use entity::{MemberRole, api_key};
use uuid::Uuid;
use worker::store::begin_write;

use super::creating::begin_creating;
use crate::audit::{self, action};
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::{actor, principal, state};
use crate::graphql::types::{ApiKey, CreateApiKeyInput, CreatedApiKey};
use worker::app::Principal;
use worker::app::access::require_role;
use worker::app::limits::{self, MAX_NAME_CHARS};
use worker::store::api_keys;

use crate::auth::key_secret::{hash_secret, new_secret};

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
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            limits::text("name", &input.name, MAX_NAME_CHARS)?;
            let expires_at = limits::future("expiresAt", input.expires_at)?;
            require_role(db, caller, input.knowledge_space_id, MemberRole::can_manage).await?;
            let secret = new_secret();
            let new = api_keys::NewApiKey {
                tenant_id: caller.tenant_id.clone(),
                knowledge_space_id: input.knowledge_space_id,
                name: input.name,
                expires_at,
                created_by: caller.subject_id.clone(),
                secret_hash: hash_secret(&secret),
            };
            let txn = begin_creating(db, &caller.tenant_id).await?;
            let key = api_keys::create(&txn, new).await?;
            audit::record(&txn, actor(ctx)?, key_entry(&key, action::API_KEY_CREATED), entity::now_millis()).await?;
            txn.commit().await?;
            Ok(CreatedApiKey::new(key, &secret))
        };
        run.await.gql()
    }

    /// Replaces the key's secret and bumps its revision: the old secret stops working and
    /// tasks created under it lose their grant.
    async fn rotate_api_key(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<CreatedApiKey> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            let txn = begin_creating(db, &caller.tenant_id).await?;
            let key = managed_key(&txn, caller, id).await?;
            if key.revoked_at.is_some() {
                return Err(ApiError::conflict("a revoked API key cannot be rotated"));
            }
            let secret = new_secret();
            let key = api_keys::rotate(&txn, key, hash_secret(&secret)).await?;
            audit::record(&txn, actor(ctx)?, key_entry(&key, action::API_KEY_ROTATED), entity::now_millis()).await?;
            txn.commit().await?;
            // Grants of the old revision just died: followed tasks re-check now, not at
            // their next poll. (Other processes notice at theirs.)
            state(ctx)?.live.recheck_grants();
            Ok(CreatedApiKey::new(key, &secret))
        };
        run.await.gql()
    }

    /// Revokes the key for good; revoking twice keeps the first revocation time.
    async fn revoke_api_key(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<ApiKey> {
        let run = async {
            let (caller, db) = (principal(ctx)?, &state(ctx)?.db);
            let txn = begin_write(db).await?;
            let key = managed_key(&txn, caller, id).await?;
            let key = api_keys::revoke(&txn, key).await?;
            audit::record(&txn, actor(ctx)?, key_entry(&key, action::API_KEY_REVOKED), entity::now_millis()).await?;
            txn.commit().await?;
            state(ctx)?.live.recheck_grants();
            Ok(ApiKey(key))
        };
        run.await.gql()
    }
}

/// The key, if the caller owns its space. Only owners see a space's keys, so to anyone
/// else a real key id answers `NOT_FOUND`, exactly as a random one does.
async fn managed_key(
    txn: &sea_orm::DatabaseTransaction,
    caller: &Principal,
    id: Uuid,
) -> Result<api_key::Model, ApiError> {
    let key = api_keys::find(txn, &caller.tenant_id, id).await?.ok_or(ApiError::NotFound)?;
    match require_role(txn, caller, key.knowledge_space_id, MemberRole::can_manage).await {
        Ok(_) => Ok(key),
        Err(ApiError::Forbidden) => Err(ApiError::NotFound),
        Err(other) => Err(other),
    }
}

/// The audit entry of an action on `key`: its id, name and revision, never its secret.
fn key_entry<'a>(key: &'a api_key::Model, action: &'static str) -> audit::Entry<'a> {
    audit::Entry {
        tenant_id: &key.tenant_id,
        knowledge_space_id: Some(key.knowledge_space_id),
        action,
        target_type: "api_key",
        target_id: Some(key.id.to_string()),
        details: serde_json::json!({ "name": key.name, "revision": key.revision }),
    }
}
