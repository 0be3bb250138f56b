//! The documents of a space a task's `limits.filters` lets evidence come from. The
//! conditions an index answers (ids, creation time) narrow the read in SQL; metadata and
//! media type are then checked here, by [`DocumentFilters::matches`], so JSON equality
//! means the same on both backends. Read once per round, not per search.
use entity::{
    DocumentFilters, FileMediaType, FilteredDocument, MediaType, knowledge_document as document,
    knowledge_document_file as file,
};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
use serde_json::Value;
use uuid::Uuid;

/// The ids of the documents of the space that meet every condition of `filters`.
pub async fn matching<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
    filters: &DocumentFilters,
) -> Result<Vec<Uuid>, DbErr> {
    let mut query = document::Entity::find()
        .select_only()
        .columns([
            document::Column::Id,
            document::Column::Metadata,
            document::Column::MediaType,
            document::Column::CreatedAt,
        ])
        .filter(document::Column::TenantId.eq(tenant_id))
        .filter(document::Column::KnowledgeSpaceId.eq(knowledge_space_id));
    if let Some(ids) = &filters.document_ids {
        query = query.filter(document::Column::Id.is_in(ids.iter().copied()));
    }
    let rows: Vec<(Uuid, Value, MediaType, i64)> = query.into_tuple().all(conn).await?;
    let uploaded: std::collections::HashMap<Uuid, FileMediaType> = file::Entity::find()
        .select_only()
        .columns([file::Column::DocumentId, file::Column::MediaType])
        .filter(file::Column::TenantId.eq(tenant_id))
        .filter(file::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .into_tuple()
        .all(conn)
        .await?
        .into_iter()
        .collect();
    Ok(rows
        .iter()
        .filter(|(id, metadata, media_type, created_at)| {
            let media_type = match (uploaded.get(id), media_type) {
                (Some(FileMediaType::Pdf), _) => "APPLICATION_PDF",
                (Some(FileMediaType::Docx), _) => "APPLICATION_DOCX",
                (None, MediaType::TextPlain) => "TEXT_PLAIN",
                (None, MediaType::TextMarkdown) => "TEXT_MARKDOWN",
                (None, MediaType::TextHtml) => "TEXT_HTML",
            };
            filters.matches(FilteredDocument { id: *id, metadata, media_type, created_at: *created_at })
        })
        .map(|(id, ..)| *id)
        .collect())
}
