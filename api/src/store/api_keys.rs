//! `knowledge_space_api_keys`: minting, rotating and revoking service credentials. The
//! presented key is `kfs_<key id as simple hex uuid>_<secret>`; only the secret's hex
//! SHA-256 is stored, so a leaked table grants nothing.
use entity::{api_key, now_millis};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder,
};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The prefix every presented key starts with, so scanners and people can recognise one.
const PREFIX: &str = "kfs_";

/// A fresh secret: 32 bytes from the thread's CSPRNG, as 64 lowercase hex characters.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes[..]);
    hex::encode(bytes)
}

/// The hex SHA-256 of a secret: what the table stores and what authentication compares.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The key string a client presents: `kfs_<id simple hex>_<secret>`.
pub fn format_key(id: Uuid, secret: &str) -> String {
    format!("{PREFIX}{}_{secret}", id.simple())
}

/// Splits a presented key into its id and secret; `None` for anything malformed.
pub fn parse_key(presented: &str) -> Option<(Uuid, String)> {
    let rest = presented.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    if id.len() != 32 || secret.is_empty() || !secret.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    Some((Uuid::try_parse(id).ok()?, secret.to_owned()))
}

/// What a new key needs.
#[derive(Debug, Clone)]
pub struct NewApiKey {
    /// The space's tenant.
    pub tenant_id: String,
    /// The one space the key may act in.
    pub knowledge_space_id: Uuid,
    /// A human label.
    pub name: String,
    /// Epoch milliseconds after which the key is refused.
    pub expires_at: Option<i64>,
    /// The owner creating it.
    pub created_by: String,
}

/// Inserts a key at revision 1; returns it with the secret (the only time it exists).
pub async fn create<C: ConnectionTrait>(conn: &C, new: NewApiKey) -> Result<(api_key::Model, String), DbErr> {
    let secret = new_secret();
    let now = now_millis();
    let row = api_key::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(new.tenant_id),
        knowledge_space_id: Set(new.knowledge_space_id),
        name: Set(new.name),
        secret_hash: Set(hash_secret(&secret)),
        revision: Set(1),
        expires_at: Set(new.expires_at),
        revoked_at: Set(None),
        created_by: Set(new.created_by),
        created_at: Set(now),
        updated_at: Set(now),
    };
    let key = api_key::Entity::insert(row).exec_with_returning(conn).await?;
    Ok((key, secret))
}

/// The key with this id in this tenant.
pub async fn find<C: ConnectionTrait>(conn: &C, tenant_id: &str, id: Uuid) -> Result<Option<api_key::Model>, DbErr> {
    api_key::Entity::find_by_id(id).filter(api_key::Column::TenantId.eq(tenant_id)).one(conn).await
}

/// Every key of a space, newest first.
pub async fn list_for_space<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
) -> Result<Vec<api_key::Model>, DbErr> {
    api_key::Entity::find()
        .filter(api_key::Column::TenantId.eq(tenant_id))
        .filter(api_key::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .order_by_desc(api_key::Column::CreatedAt)
        .order_by_desc(api_key::Column::Id)
        .all(conn)
        .await
}

/// Replaces the secret and bumps the revision, which kills every grant issued under the
/// old one; returns the key with the new secret.
pub async fn rotate<C: ConnectionTrait>(conn: &C, key: api_key::Model) -> Result<(api_key::Model, String), DbErr> {
    let secret = new_secret();
    let revision = key.revision + 1;
    let mut row = key.into_active_model();
    row.secret_hash = Set(hash_secret(&secret));
    row.revision = Set(revision);
    row.updated_at = Set(now_millis());
    Ok((row.update(conn).await?, secret))
}

/// Marks the key revoked now; a key revoked before keeps its first revocation time.
pub async fn revoke<C: ConnectionTrait>(conn: &C, key: api_key::Model) -> Result<api_key::Model, DbErr> {
    if key.revoked_at.is_some() {
        return Ok(key);
    }
    let now = now_millis();
    let mut row = key.into_active_model();
    row.revoked_at = Set(Some(now));
    row.updated_at = Set(now);
    row.update(conn).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_formatted_key_parses_back_to_its_id_and_secret() {
        let id = Uuid::now_v7();
        let secret = new_secret();
        assert_eq!(parse_key(&format_key(id, &secret)), Some((id, secret)));
    }

    #[test]
    fn malformed_keys_do_not_parse() {
        let id = Uuid::now_v7().simple().to_string();
        for bad in ["", "kfs_", "kfs_abc_def", &format!("xfs_{id}_ab"), &format!("kfs_{id}_"), &format!("kfs_{id}_zz")]
        {
            assert_eq!(parse_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn secrets_are_long_distinct_and_hashed_to_hex() {
        let (one, two) = (new_secret(), new_secret());
        assert_eq!(one.len(), 64);
        assert_ne!(one, two);
        assert_eq!(hash_secret(&one).len(), 64);
        assert_ne!(hash_secret(&one), one);
    }
}
