//! `knowledge_documents`: what research retrieves from (full-text indexed).
use sea_orm::entity::prelude::*;

/// One document in one space.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "knowledge_documents")]
pub struct Model {
    /// The document's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The space's tenant.
    pub tenant_id: String,
    /// The space the document belongs to.
    pub knowledge_space_id: Uuid,
    /// A short title.
    pub title: String,
    /// The full text.
    #[sea_orm(column_type = "Text")]
    pub content: String,
    /// The subject who added it.
    pub created_by: String,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Epoch milliseconds.
    pub updated_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
