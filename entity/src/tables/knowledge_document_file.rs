//! `knowledge_document_files`: the file a document was uploaded as, and where its text
//! extraction stands. Its bytes are in `knowledge_document_file_parts`.
use sea_orm::entity::prelude::*;

use crate::{FileMediaType, FileState};

/// One uploaded file, of one document.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "knowledge_document_files")]
pub struct Model {
    /// The document the file is the source of.
    #[sea_orm(primary_key, auto_increment = false)]
    pub document_id: Uuid,
    /// The document's tenant (the upload quota counts by it).
    pub tenant_id: String,
    /// The document's space.
    pub knowledge_space_id: Uuid,
    /// The name the file was uploaded with.
    pub file_name: String,
    /// What the bytes are.
    pub media_type: FileMediaType,
    /// The file's size.
    pub byte_size: i64,
    /// The document revision this file is the source of; an extraction writes only into it.
    pub document_revision: i32,
    /// Where extraction stands.
    pub state: FileState,
    /// Why extraction failed, when it did.
    #[sea_orm(column_type = "Text", nullable)]
    pub error: Option<String>,
    /// Extraction attempts so far.
    pub attempts: i32,
    /// When the extraction loop may take it (again), epoch milliseconds; null when settled.
    pub available_at: Option<i64>,
    /// The extraction loop's lease: its token…
    pub lock_token: Option<Uuid>,
    /// …and until when it holds, epoch milliseconds.
    pub locked_until: Option<i64>,
    /// How many pages a PDF has, once extracted.
    pub page_count: Option<i32>,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Epoch milliseconds.
    pub updated_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
