//! `knowledge_documents`: what research retrieves from, split into passages
//! (`knowledge_passages`) whenever its content is written.
use sea_orm::entity::prelude::*;

use crate::{IndexingStatus, MediaType};

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
    /// The full text, in `media_type`.
    #[sea_orm(column_type = "Text")]
    pub content: String,
    /// The subject who added it.
    pub created_by: String,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Epoch milliseconds.
    pub updated_at: i64,
    /// What `content` is written in.
    pub media_type: MediaType,
    /// Where the document came from, as its author said.
    #[sea_orm(column_type = "Text", nullable)]
    pub source_uri: Option<String>,
    /// The author's own data, a JSON object.
    #[sea_orm(column_type = "JsonBinary")]
    pub metadata: Json,
    /// 1, then one more on every edit; embedding work for an older revision is dropped.
    pub revision: i32,
    /// The revision the stored passages were split from; null until the first split.
    pub indexed_revision: Option<i32>,
    /// Whether every ranker can use the passages.
    pub indexing_status: IndexingStatus,
    /// Why embedding failed, when it did.
    #[sea_orm(column_type = "Text", nullable)]
    pub indexing_error: Option<String>,
    /// Embedding attempts of this revision so far.
    pub indexing_attempts: i32,
    /// When the embedding loop may try this document (again), epoch milliseconds.
    pub indexing_available_at: Option<i64>,
    /// The embedding loop's lock: its token, its name and until when it holds the row.
    pub indexing_lock_token: Option<Uuid>,
    /// Who holds the embedding lock.
    pub indexing_locked_by: Option<String>,
    /// Until when the embedding lock holds, epoch milliseconds.
    pub indexing_locked_until: Option<i64>,
    /// The subject who last edited it.
    pub updated_by: Option<String>,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
