//! Service credentials (`knowledge_space_api_keys`): minting, rotating and revoking. Only
//! a secret's hash is stored (the caller makes the secret and its hash), so a leaked table
//! grants nothing.
use entity::{api_key, now_millis};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder,
};
use uuid::Uuid;

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
    /// The hash of its secret.
    pub secret_hash: String,
}

/// Inserts a key at revision 1.
pub async fn create<C: ConnectionTrait>(conn: &C, new: NewApiKey) -> Result<api_key::Model, DbErr> {
    let now = now_millis();
    let row = api_key::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(new.tenant_id),
        knowledge_space_id: Set(new.knowledge_space_id),
        name: Set(new.name),
        secret_hash: Set(new.secret_hash),
        revision: Set(1),
        expires_at: Set(new.expires_at),
        revoked_at: Set(None),
        created_by: Set(new.created_by),
        created_at: Set(now),
        updated_at: Set(now),
    };
    api_key::Entity::insert(row).exec_with_returning(conn).await
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

/// Replaces the secret's hash and bumps the revision, which kills every grant issued
/// under the old one.
pub async fn rotate<C: ConnectionTrait>(
    conn: &C,
    key: api_key::Model,
    secret_hash: String,
) -> Result<api_key::Model, DbErr> {
    let revision = key.revision + 1;
    let mut row = key.into_active_model();
    row.secret_hash = Set(secret_hash);
    row.revision = Set(revision);
    row.updated_at = Set(now_millis());
    row.update(conn).await
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

/// The key by id alone (any tenant's: for checks that compare its tenant themselves).
pub async fn find_any<C: ConnectionTrait>(conn: &C, id: Uuid) -> Result<Option<api_key::Model>, DbErr> {
    api_key::Entity::find_by_id(id).one(conn).await
}

/// The keys with these ids (any tenant's).
pub async fn find_many<C: ConnectionTrait>(conn: &C, ids: &[Uuid]) -> Result<Vec<api_key::Model>, DbErr> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    api_key::Entity::find().filter(api_key::Column::Id.is_in(ids.iter().copied())).all(conn).await
}
