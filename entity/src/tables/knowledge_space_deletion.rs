//! `knowledge_space_deletions`: spaces whose deletion has begun and not finished.
use sea_orm::entity::prelude::*;

/// One space being deleted.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "knowledge_space_deletions")]
pub struct Model {
    /// The space.
    #[sea_orm(primary_key, auto_increment = false)]
    pub knowledge_space_id: Uuid,
    /// Its tenant.
    pub tenant_id: String,
    /// Who asked.
    pub requested_by: String,
    /// Epoch milliseconds.
    pub requested_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
