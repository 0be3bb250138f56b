//! `research_threads`: a conversation of research tasks, one subject's in one space.
use sea_orm::entity::prelude::*;

/// One thread.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "research_threads")]
pub struct Model {
    /// The thread.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// Its tenant.
    pub tenant_id: String,
    /// The space every turn researches.
    pub knowledge_space_id: Uuid,
    /// Whose it is.
    pub subject_id: String,
    /// A title the client gave (at most 512 characters).
    pub title: Option<String>,
    /// The client's metadata, a JSON object.
    #[sea_orm(column_type = "JsonBinary")]
    pub metadata: Json,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// When it or its turns last changed (a turn added), epoch milliseconds.
    pub updated_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
