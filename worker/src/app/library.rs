//! The knowledge a caller may read, outside a task: ranked passages for a few words, and
//! one passage or document by id. Another tenant's or space's id answers as one that does
//! not exist.
use entity::{knowledge_document as document, knowledge_passage as passage};
use uuid::Uuid;

use super::access::space_access;
use super::limits::{self, MAX_QUERY_CHARS};
use super::{App, AppError, Principal};
use crate::knowledge::search::{Found, full_text};
use crate::store::{documents, filtered, passages, spaces};

/// What a search asks for.
pub struct Searched<'a> {
    /// The words.
    pub query: &'a str,
    /// One space, or every one the caller may read (at most `max_spaces`).
    pub space: Option<Uuid>,
    /// Which documents count (`limits.filters`' shape).
    pub filters: Option<&'a entity::DocumentFilters>,
    /// The most passages to answer.
    pub limit: u64,
    /// The most spaces a search without a space looks in.
    pub max_spaces: u64,
}

/// The best passages for the query in its space (or every space the caller may read),
/// among the documents its filters allow, best first, each with its document.
pub async fn search(
    app: &App,
    caller: &Principal,
    searched: Searched<'_>,
) -> Result<Vec<(Found, Option<document::Model>)>, AppError> {
    let Searched { query, space, filters, limit, max_spaces } = searched;
    limits::text("query", query, MAX_QUERY_CHARS)?;
    let db = &app.db;
    let in_spaces: Vec<Uuid> = match (space, &caller.api_key) {
        (Some(space), _) => {
            space_access(db, caller, space).await?.ok_or(AppError::NotFound)?;
            vec![space]
        }
        (None, Some(key)) => vec![key.knowledge_space_id],
        (None, None) => spaces::page_for_member(db, &caller.tenant_id, &caller.subject_id, None, max_spaces)
            .await?
            .into_iter()
            .map(|space| space.id)
            .collect(),
    };
    let terms = crate::research::engine::search_terms(query);
    let mut found = Vec::new();
    for knowledge_space_id in in_spaces {
        let allowed = match filters {
            Some(filters) => Some(filtered::matching(db, &caller.tenant_id, knowledge_space_id, filters).await?),
            None => None,
        };
        let scope = passages::Scope { tenant_id: &caller.tenant_id, knowledge_space_id, documents: allowed.as_deref() };
        found.extend(full_text(db, scope, &terms, limit).await?);
    }
    found.sort_by(|a, b| b.score.total_cmp(&a.score));
    found.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let mut results = Vec::with_capacity(found.len());
    for passage in found {
        let document = documents::find(db, &caller.tenant_id, passage.document_id).await?;
        results.push((passage, document));
    }
    Ok(results)
}

/// One item of the library, by id.
pub enum Item {
    /// A passage, with its document (gone when deleted since).
    Passage(Box<passage::Model>, Option<document::Model>),
    /// A document, whole.
    Document(document::Model),
}

/// The passage or document `id`, if `caller` may read its space; NOT_FOUND otherwise.
pub async fn fetch(app: &App, caller: &Principal, id: Uuid) -> Result<Item, AppError> {
    let db = &app.db;
    if let Some(passage) = passages::find(db, &caller.tenant_id, id).await?
        && space_access(db, caller, passage.knowledge_space_id).await?.is_some()
    {
        let document = documents::find(db, &caller.tenant_id, passage.document_id).await?;
        return Ok(Item::Passage(Box::new(passage), document));
    }
    if let Some(document) = documents::find(db, &caller.tenant_id, id).await?
        && space_access(db, caller, document.knowledge_space_id).await?.is_some()
    {
        return Ok(Item::Document(document));
    }
    Err(AppError::NotFound)
}
