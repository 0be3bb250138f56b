//! `knowledge_space_permission_snapshots`: the durable grant a task runs under.
use sea_orm::entity::prelude::*;

use crate::AccessChannel;

/// A grant issued when a task is created. For an API key it records the key's id,
/// revision and expiry (the seed's binding), so rotating, revoking or expiring the key
/// kills it; for a member it records the membership revision.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "knowledge_space_permission_snapshots")]
pub struct Model {
    /// The grant's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The space's tenant.
    pub tenant_id: String,
    /// The space the grant is for.
    pub knowledge_space_id: Uuid,
    /// Who holds the grant.
    pub subject_id: String,
    /// How the holder reached the service.
    pub access_channel: AccessChannel,
    /// The membership revision (or API key revision) the grant was issued at.
    pub revision: i32,
    /// The permissions granted, a JSON array of strings.
    #[sea_orm(column_type = "JsonBinary")]
    pub permissions: Json,
    /// Epoch milliseconds.
    pub issued_at: i64,
    /// The API key the grant came from; null for a non-key principal.
    pub api_key_id: Option<Uuid>,
    /// The key's revision when the grant was issued.
    pub api_key_revision: Option<i32>,
    /// The key's expiry when the grant was issued.
    pub api_key_expires_at: Option<DateTimeWithTimeZone>,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
