//! `tenant_erasures`: tenants whose erasure has begun and not finished (the seal that
//! refuses anything new for them meanwhile).
use sea_orm::entity::prelude::*;

/// One tenant being erased.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "tenant_erasures")]
pub struct Model {
    /// The tenant.
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    /// The operator who asked.
    pub requested_by: String,
    /// Epoch milliseconds.
    pub requested_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
