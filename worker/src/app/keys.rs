//! API keys: minted, rotated and revoked by a space's owners. The secret is shown once,
//! when minted or rotated; only its hash is stored.
use entity::{MemberRole, api_key};
use sea_orm::DatabaseTransaction;
use uuid::Uuid;

use super::access::require_role;
use super::audit::{self, Actor, action};
use super::key_secret::{hash_secret, new_secret};
use super::limits::{self, MAX_NAME_CHARS};
use super::writes::{begin, begin_creating};
use super::{App, AppError, Principal};
use crate::store::api_keys;

/// A key to mint, as a channel received it.
pub struct KeyRequest {
    /// The one space the key may act in.
    pub knowledge_space_id: Uuid,
    /// Its name, 1 to 255 characters.
    pub name: String,
    /// When it stops working (in the future), if ever.
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// A key with its secret, the one time it is shown.
pub struct KeyWithSecret {
    /// The key.
    pub key: api_key::Model,
    /// Its secret.
    pub secret: String,
}

/// Mints a key bound to one space, which the caller must manage.
pub async fn create(app: &App, actor: Actor<'_>, request: KeyRequest) -> Result<KeyWithSecret, AppError> {
    let caller = actor.principal;
    limits::text("name", &request.name, MAX_NAME_CHARS)?;
    let expires_at = limits::future("expiresAt", request.expires_at)?;
    require_role(&app.db, caller, request.knowledge_space_id, MemberRole::can_manage).await?;
    let secret = new_secret();
    let new = api_keys::NewApiKey {
        tenant_id: caller.tenant_id.clone(),
        knowledge_space_id: request.knowledge_space_id,
        name: request.name,
        expires_at,
        created_by: caller.subject_id.clone(),
        secret_hash: hash_secret(&secret),
    };
    let txn = begin_creating(&app.db, &caller.tenant_id).await?;
    let key = api_keys::create(&txn, new).await?;
    audit::record(&txn, actor, key_entry(&key, action::API_KEY_CREATED), entity::now_millis()).await?;
    txn.commit().await?;
    Ok(KeyWithSecret { key, secret })
}

/// Replaces the key's secret and bumps its revision: the old secret stops working and
/// tasks created under it lose their grant.
pub async fn rotate(app: &App, actor: Actor<'_>, id: Uuid) -> Result<KeyWithSecret, AppError> {
    let txn = begin_creating(&app.db, &actor.principal.tenant_id).await?;
    let key = managed_key(&txn, actor.principal, id).await?;
    if key.revoked_at.is_some() {
        return Err(AppError::conflict("a revoked API key cannot be rotated"));
    }
    let secret = new_secret();
    let key = api_keys::rotate(&txn, key, hash_secret(&secret)).await?;
    audit::record(&txn, actor, key_entry(&key, action::API_KEY_ROTATED), entity::now_millis()).await?;
    txn.commit().await?;
    Ok(KeyWithSecret { key, secret })
}

/// Revokes the key for good; revoking twice keeps the first revocation time.
pub async fn revoke(app: &App, actor: Actor<'_>, id: Uuid) -> Result<api_key::Model, AppError> {
    let txn = begin(&app.db).await?;
    let key = managed_key(&txn, actor.principal, id).await?;
    let key = api_keys::revoke(&txn, key).await?;
    audit::record(&txn, actor, key_entry(&key, action::API_KEY_REVOKED), entity::now_millis()).await?;
    txn.commit().await?;
    Ok(key)
}

/// The key, if the caller owns its space. Only owners see a space's keys, so to anyone
/// else a real key id answers `NOT_FOUND`, exactly as a random one does.
async fn managed_key(txn: &DatabaseTransaction, caller: &Principal, id: Uuid) -> Result<api_key::Model, AppError> {
    let key = api_keys::find(txn, &caller.tenant_id, id).await?.ok_or(AppError::NotFound)?;
    match require_role(txn, caller, key.knowledge_space_id, MemberRole::can_manage).await {
        Ok(_) => Ok(key),
        Err(AppError::Forbidden) => Err(AppError::NotFound),
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

/// The service principal a presented key (`kfs_<key id>_<secret>`) stands for. The id finds
/// the row; the secret's SHA-256 is compared with the stored hash in constant time. Unknown,
/// wrong, revoked and expired keys all answer the same UNAUTHENTICATED.
pub async fn authenticate(db: &sea_orm::DatabaseConnection, presented: &str) -> Result<Principal, AppError> {
    use subtle::ConstantTimeEq as _;
    let (key_id, secret) = super::key_secret::parse_key(presented).ok_or(AppError::Unauthenticated)?;
    let key = api_keys::find_any(db, key_id).await?;
    // Hash even when the key is unknown, so timing does not tell which ids exist.
    let presented_hash = hash_secret(&secret);
    let Some(key) = key else {
        return Err(AppError::Unauthenticated);
    };
    let matches: bool = presented_hash.as_bytes().ct_eq(key.secret_hash.as_bytes()).into();
    if !matches || !holds(&key, key.revision, entity::now_millis()) {
        return Err(AppError::Unauthenticated);
    }
    Ok(Principal {
        tenant_id: key.tenant_id.clone(),
        subject_id: key.subject_id(),
        channel: entity::AccessChannel::ServiceApi,
        api_key: Some(super::ApiKeyCredential {
            key_id: key.id,
            knowledge_space_id: key.knowledge_space_id,
            revision: key.revision,
            expires_at: key.expires_at,
        }),
        expires_at: key.expires_at,
        issuer: None,
    })
}

/// Whether `key` still authenticates at `revision` at `now`: not revoked, not rotated
/// since, not expired. Authentication, the live layer's watch over open connections and a
/// feed deciding why it ended all apply this one rule.
pub fn holds(key: &api_key::Model, revision: i32, now: i64) -> bool {
    key.revoked_at.is_none() && key.revision == revision && key.expires_at.is_none_or(|at| at > now)
}

/// Whether the key a caller authenticated with still holds now (false for a deleted key).
pub async fn credential_holds(
    db: &sea_orm::DatabaseConnection,
    credential: &super::ApiKeyCredential,
) -> Result<bool, AppError> {
    let key = api_keys::find_any(db, credential.key_id).await?;
    Ok(key.is_some_and(|key| holds(&key, credential.revision, entity::now_millis())))
}
