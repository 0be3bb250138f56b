//! `knowledge_space_api_keys`: credentials of service clients, bound to one space.
use sea_orm::entity::prelude::*;

/// One API key. Only a hash of its secret is stored; rotation replaces the hash and bumps
/// the revision, which kills every grant issued under the old secret.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "knowledge_space_api_keys")]
pub struct Model {
    /// The key's id; also part of the presented key, so lookups need no scan.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The space's tenant.
    pub tenant_id: String,
    /// The one space the key may act in.
    pub knowledge_space_id: Uuid,
    /// A human label.
    pub name: String,
    /// Hex SHA-256 of the secret. The secret itself is never stored.
    pub secret_hash: String,
    /// Starts at 1, bumped on every rotation.
    pub revision: i32,
    /// Epoch milliseconds after which the key is refused; null for no expiry.
    pub expires_at: Option<i64>,
    /// Epoch milliseconds when the key was revoked; null while live.
    pub revoked_at: Option<i64>,
    /// The owner who created it.
    pub created_by: String,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Epoch milliseconds.
    pub updated_at: i64,
}

impl Model {
    /// The subject id every grant from this key carries, stable across rotations.
    pub fn subject_id(&self) -> String {
        format!("api_key:{}", self.id)
    }
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
