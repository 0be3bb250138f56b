//! API keys: `kfs_<key id>_<secret>`. The id finds the row; the secret's SHA-256 is
//! compared with the stored hash in constant time.
use entity::{AccessChannel, now_millis};
use sea_orm::DatabaseConnection;
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use worker::app::key_secret::{hash_secret, parse_key};
use worker::app::{ApiKeyCredential, Principal};

/// Checks a presented key and returns the service principal it stands for. Unknown,
/// wrong, revoked and expired keys all answer the same `Unauthenticated`.
pub async fn authenticate_api_key(db: &DatabaseConnection, presented: &str) -> Result<Principal, ApiError> {
    let (key_id, secret) = parse_key(presented).ok_or(ApiError::Unauthenticated)?;
    let key = worker::store::api_keys::find_any(db, key_id).await.map_err(ApiError::from)?;
    // Hash even when the key is unknown, so timing does not tell which ids exist.
    let presented_hash = hash_secret(&secret);
    let Some(key) = key else {
        return Err(ApiError::Unauthenticated);
    };
    let matches: bool = presented_hash.as_bytes().ct_eq(key.secret_hash.as_bytes()).into();
    let live = key.revoked_at.is_none() && key.expires_at.is_none_or(|at| at > now_millis());
    if !matches || !live {
        return Err(ApiError::Unauthenticated);
    }
    Ok(Principal {
        tenant_id: key.tenant_id.clone(),
        subject_id: key.subject_id(),
        channel: AccessChannel::ServiceApi,
        api_key: Some(ApiKeyCredential {
            key_id: key.id,
            knowledge_space_id: key.knowledge_space_id,
            revision: key.revision,
            expires_at: key.expires_at,
        }),
        expires_at: key.expires_at,
        issuer: None,
    })
}
