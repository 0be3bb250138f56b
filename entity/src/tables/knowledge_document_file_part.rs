//! `knowledge_document_file_parts`: an uploaded file's bytes, in order, at most a
//! mebibyte a part, so a file is written and read a part at a time.
use sea_orm::entity::prelude::*;

/// One part of one file.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "knowledge_document_file_parts")]
pub struct Model {
    /// The file's document.
    #[sea_orm(primary_key, auto_increment = false)]
    pub document_id: Uuid,
    /// 0, 1, 2… in file order.
    #[sea_orm(primary_key, auto_increment = false)]
    pub part: i32,
    /// The part's bytes.
    #[sea_orm(column_type = "Blob")]
    pub bytes: Vec<u8>,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
