//! `knowledge_passages`: the pieces of a document research retrieves and cites.
use sea_orm::entity::prelude::*;

/// One passage of one document.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "knowledge_passages")]
pub struct Model {
    /// The passage's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The space's tenant.
    pub tenant_id: String,
    /// The space.
    pub knowledge_space_id: Uuid,
    /// The document it is a piece of.
    pub document_id: Uuid,
    /// The document revision it was split from.
    pub document_revision: i32,
    /// 0, 1, 2… in document order.
    pub ordinal: i32,
    /// Where it starts in the document's `content`, in Unicode code points.
    pub char_start: i32,
    /// Where it ends (exclusive), in Unicode code points.
    pub char_end: i32,
    /// The headings above it, outermost first: a JSON array of strings.
    #[sea_orm(column_type = "JsonBinary")]
    pub heading_path: Json,
    /// The document's title and the headings, as full-text search weighs them with the text.
    #[sea_orm(column_type = "Text")]
    pub context: String,
    /// The passage's text (for HTML and Markdown, without the markup).
    #[sea_orm(column_type = "Text")]
    pub text: String,
    /// Its size in estimated tokens.
    pub token_count: i32,
    /// The first page of a PDF it comes from (1-based); null for other formats.
    pub page_start: Option<i32>,
    /// The last page of a PDF it comes from (inclusive); null for other formats.
    pub page_end: Option<i32>,
    /// Where each character of `text` came from in the content: an `entity::SourceMap`
    /// as stored; null for passages split before maps were recorded.
    #[sea_orm(column_type = "Text", nullable)]
    pub source_map: Option<String>,
    /// Epoch milliseconds.
    pub created_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
