//! `knowledge_space_members`: who may use a space, and how.
use sea_orm::entity::prelude::*;

use crate::MemberRole;

/// One subject's membership of one space. A removal keeps the row (with `removed_at`) so
/// the revision keeps rising and a grant issued before the removal never comes back to life.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "knowledge_space_members")]
pub struct Model {
    /// Surrogate key.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The space's tenant.
    pub tenant_id: String,
    /// The space.
    pub knowledge_space_id: Uuid,
    /// The member's subject id (a JWT `sub`).
    pub subject_id: String,
    /// What the member may do.
    pub role: MemberRole,
    /// Bumped on every change (role, removal, re-adding); grants record it.
    pub revision: i32,
    /// Epoch milliseconds when the member was removed; null while a member.
    pub removed_at: Option<i64>,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Epoch milliseconds.
    pub updated_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
