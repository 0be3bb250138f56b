use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};

/// What an uploaded file is, as its bytes say (never as the client named it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(128))")]
pub enum FileMediaType {
    /// A PDF; its text layer is extracted page by page.
    #[sea_orm(string_value = "application/pdf")]
    #[serde(rename = "application/pdf")]
    Pdf,
    /// A Word (Office Open XML) document; its headings become heading paths.
    #[sea_orm(string_value = "application/vnd.openxmlformats-officedocument.wordprocessingml.document")]
    #[serde(rename = "application/vnd.openxmlformats-officedocument.wordprocessingml.document")]
    Docx,
}

impl FileMediaType {
    /// The file name extension people give it.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Pdf => "pdf",
            Self::Docx => "docx",
        }
    }
}

/// Where an uploaded file's extraction stands. The document's own indexing status takes
/// over once its text is written (`done`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize, Deserialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum FileState {
    /// Waiting for (or in) text extraction in a worker.
    #[sea_orm(string_value = "extracting")]
    Extracting,
    /// The text is extracted; being split into passages.
    #[sea_orm(string_value = "splitting")]
    Splitting,
    /// The document holds the file's text and passages.
    #[sea_orm(string_value = "done")]
    Done,
    /// The file could not be read; the row's `error` says why.
    #[sea_orm(string_value = "failed")]
    Failed,
}
