//! The documents of a space a task's `limits.filters` lets evidence come from. SQL narrows
//! the read: the ids, and the values of the metadata key naming the fewest (PostgreSQL:
//! JSON containment, which the GIN index over `metadata` answers; SQLite: the key's values
//! through `json_each`), a superset of what matches; every row read is then checked by the one rule,
//! [`DocumentFilters::matches`], so JSON equality means the same on both backends. Read
//! once per round, not per search.
use entity::{
    DocumentFilters, FileMediaType, FilteredDocument, MediaType, knowledge_document as document,
    knowledge_document_file as file,
};
use sea_orm::sea_query::Condition;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
use serde_json::Value;
use uuid::Uuid;

use super::backend::{Backend, on_backend};

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
    if let Some((key, want)) = filters.metadata.as_ref().and_then(narrowest_key)
        && let Some(condition) = on_backend!(conn, |B| metadata_condition::<B>(key, want))
    {
        query = query.filter(condition);
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
    let matcher = filters.matcher();
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
            matcher.matches(FilteredDocument { id: *id, metadata, media_type, created_at: *created_at })
        })
        .map(|(id, ..)| *id)
        .collect())
}

/// The most values of one key SQL narrows by: each is an index probe on PostgreSQL (two,
/// for a list) and a `json_each` on SQLite, and the planner's time grows with their number.
const MAX_NARROWING_VALUES: usize = 8;

/// The metadata key SQL narrows the read by: the one naming the fewest values, if it names
/// few enough. Only one key, because every further key multiplies the conditions the
/// database plans and evaluates while the rule checks all of them in one pass anyway: the
/// largest filter the limits allow (32 keys of 100 values) cost seconds when every value
/// was a condition.
fn narrowest_key(wanted: &serde_json::Map<String, Value>) -> Option<(&str, &Value)> {
    let count = |want: &Value| match want {
        Value::Array(values) => values.len(),
        _ => 1,
    };
    wanted
        .iter()
        .filter(|(_, want)| count(want) <= MAX_NARROWING_VALUES)
        .min_by_key(|(_, want)| count(want))
        .map(|(key, want)| (key.as_str(), want))
}

/// A condition every document whose `key` matches `want` meets (more may meet it; the
/// rule decides), or `None` when SQL cannot narrow this key.
fn metadata_condition<B: Backend>(key: &str, want: &Value) -> Option<Condition> {
    let values: &[Value] = match want {
        Value::Array(values) => values,
        single => std::slice::from_ref(single),
    };
    let mut any = Condition::any();
    for value in values {
        any = any.add(B::metadata_holds(key, value)?);
    }
    Some(any)
}
