//! `knowledge_spaces`: the permission boundary research runs inside.
use sea_orm::entity::prelude::*;

/// One knowledge space of one tenant.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "knowledge_spaces")]
pub struct Model {
    /// The space's id, unique across tenants.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The tenant that owns the space.
    pub tenant_id: String,
    /// A human name, unique only for display.
    pub name: String,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Epoch milliseconds.
    pub updated_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
