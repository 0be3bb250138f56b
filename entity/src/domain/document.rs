use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

pub use media_type::MediaType;

/// A module of its own for one lint: the derive names a value enum after the MIME strings,
/// which all start `text/`.
mod media_type {
    #![expect(clippy::enum_variant_names, reason = "the derive's value enum repeats the MIME strings' `text/`")]
    use sea_orm::entity::prelude::*;
    use serde::{Deserialize, Serialize};

    /// What a document's `content` is written in; it decides how the document is split into
    /// passages.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
    #[sea_orm(rs_type = "String", db_type = "String(StringLen::N(32))")]
    pub enum MediaType {
        /// Paragraphs separated by blank lines.
        #[sea_orm(string_value = "text/plain")]
        #[serde(rename = "text/plain")]
        TextPlain,
        /// CommonMark: headings, paragraphs, lists, code blocks, tables.
        #[sea_orm(string_value = "text/markdown")]
        #[serde(rename = "text/markdown")]
        TextMarkdown,
        /// HTML: block elements; scripts and styles are not text.
        #[sea_orm(string_value = "text/html")]
        #[serde(rename = "text/html")]
        TextHtml,
    }
}

/// Whether a document's passages are ready for every ranker research uses. Full-text
/// search indexes a document in the transaction that writes it; embeddings, when they are
/// configured, come later from a background loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum IndexingStatus {
    /// Waiting for its embeddings (full-text search finds it already).
    #[sea_orm(string_value = "pending")]
    Pending,
    /// Every passage has what each ranker needs.
    #[sea_orm(string_value = "ready")]
    Ready,
    /// Embedding gave up; `indexing_error` says why. Full-text search still finds it.
    #[sea_orm(string_value = "failed")]
    Failed,
}
