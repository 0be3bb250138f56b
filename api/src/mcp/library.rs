//! `search` and `fetch` in the shape ChatGPT connectors and deep research expect: search
//! ranks the passages of the caller's spaces (one, or every one it may read) by full
//! text; fetch returns one passage or one document whole. Both read only through the
//! caller's access: another tenant's or space's id answers as one that does not exist.
use entity::knowledge_document as document;
use serde_json::{Value, json};
use uuid::Uuid;

use worker::app::library::{self, Item};

use crate::error::ApiError;
use crate::state::AppState;
use worker::app::Principal;

pub use worker::app::library::Searched;

/// The best passages for the query (`worker::app::library::search`), as the tool answers.
pub async fn search(state: &AppState, caller: &Principal, searched: Searched<'_>) -> Result<Value, ApiError> {
    let found = library::search(&state.app, caller, searched).await?;
    let results: Vec<Value> = found
        .into_iter()
        .map(|(passage, document)| {
            let url = item_url(state, passage.passage_id, document.as_ref());
            json!({ "id": passage.passage_id, "title": passage.title, "text": passage.text, "url": url })
        })
        .collect();
    Ok(json!({ "results": results }))
}

/// One passage, or one document, whole (`worker::app::library::fetch`), as the tool answers.
pub async fn fetch(state: &AppState, caller: &Principal, id: Uuid) -> Result<Value, ApiError> {
    match library::fetch(&state.app, caller, id).await? {
        Item::Passage(passage, document) => {
            let title = document.as_ref().map(|document| document.title.clone()).unwrap_or_default();
            let metadata = json!({
                "kind": "passage",
                "document_id": passage.document_id,
                "knowledge_space_id": passage.knowledge_space_id,
                "char_start": passage.char_start,
                "char_end": passage.char_end,
                "heading_path": passage.heading_path,
                "document": document.as_ref().map(|document| document.metadata.clone()),
            });
            let url = item_url(state, passage.id, document.as_ref());
            Ok(json!({ "id": passage.id, "title": title, "text": passage.text, "url": url, "metadata": metadata }))
        }
        Item::Document(document) => {
            let (text, truncated) = cut(&document.content, FETCH_MAX_TEXT_BYTES);
            let metadata = json!({
                "kind": "document",
                "knowledge_space_id": document.knowledge_space_id,
                "media_type": document.media_type,
                "revision": document.revision,
                "document": document.metadata,
                "truncated": truncated,
                "text_bytes": document.content.len(),
            });
            let url = item_url(state, document.id, Some(&document));
            Ok(json!({ "id": document.id, "title": document.title, "text": text, "url": url, "metadata": metadata }))
        }
    }
}

/// The most text (UTF-8 bytes) a fetched document carries: a model reads passages, and a
/// tool result is held whole in memory on both sides. A longer document is cut at a
/// character boundary and says so (`metadata.truncated`, `metadata.text_bytes`); its
/// passages, which `search` finds, each fetch whole.
pub const FETCH_MAX_TEXT_BYTES: usize = 1 << 20;

/// `text` cut to at most `max` bytes at a character boundary, and whether it was cut.
fn cut(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let end = (0..=max).rev().find(|&index| text.is_char_boundary(index)).unwrap_or(0);
    (&text[..end], true)
}

/// The item's URL: its document's `sourceUri` when that is an absolute http(s) URL, else
/// this server's own URL for the item, which answers `fetch`'s result to the same caller.
fn item_url(state: &AppState, id: Uuid, document: Option<&document::Model>) -> String {
    let source = document.and_then(|document| document.source_uri.as_deref()).filter(|uri| {
        uri.parse::<axum::http::Uri>()
            .is_ok_and(|uri| matches!(uri.scheme_str(), Some("http" | "https")) && uri.authority().is_some())
    });
    match source {
        Some(uri) => uri.to_owned(),
        None => format!("{}{}/{id}", state.public_url.trim_end_matches('/'), super::urls::ITEMS),
    }
}

/// `GET /mcp/items/{id}`: `fetch` over plain HTTP, behind the same guard as `/mcp`.
pub async fn fetch_http(
    axum::extract::State(state): axum::extract::State<AppState>,
    axum::Extension(caller): axum::Extension<Principal>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let found = match Uuid::parse_str(&id) {
        Ok(id) => fetch(&state, &caller, id).await,
        Err(_) => Err(ApiError::NotFound),
    };
    let found = found.and_then(|item| super::response_limit::within(&state, item));
    match found {
        Ok(item) => axum::Json(item).into_response(),
        Err(error) => {
            let status = match error {
                ApiError::NotFound => axum::http::StatusCode::NOT_FOUND,
                ApiError::TooComplex(_) => axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                _ => axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            };
            (status, axum::Json(json!({ "error": { "code": error.code() } }))).into_response()
        }
    }
}
