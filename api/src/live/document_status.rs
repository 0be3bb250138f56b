//! Following an uploaded document's status (`knowledgeDocumentStatus`): the document as it
//! is now, then again at each change of its status, ending at `READY` or `FAILED`. The
//! extraction may run in another process, so the feed polls the document's two rows (a
//! primary-key read each) rather than waiting on a signal only this process would hear;
//! the subscription is short-lived (it ends with the extraction) and each WebSocket holds
//! a bounded number of them.
use std::time::Duration;

use entity::{IndexingStatus, knowledge_document as document, knowledge_document_file as file};
use futures_util::Stream;
use uuid::Uuid;
use worker::knowledge::uploads::{ShownStatus, shown_status};
use worker::store::{documents, files};

use crate::auth::Principal;
use crate::error::ApiError;
use crate::graphql::access::space_access;
use crate::state::AppState;

/// How often a followed document is read.
pub const DOCUMENT_POLL: Duration = Duration::from_millis(200);

/// A document, its uploaded file's row and the status the two show, read together.
pub type Snapshot = (document::Model, Option<file::Model>, ShownStatus);

/// The document, its file and its status, if `caller` may read it.
pub async fn readable_document(app: &AppState, caller: &Principal, id: Uuid) -> Result<Option<Snapshot>, ApiError> {
    let Some(found) = documents::find(&app.db, &caller.tenant_id, id).await? else { return Ok(None) };
    if space_access(&app.db, caller, found.knowledge_space_id).await?.is_none() {
        return Ok(None);
    }
    let file = files::find(&app.db, id).await?;
    let shown = shown_status(file.as_ref().map(|file| file.state), &found);
    Ok(Some((found, file, shown)))
}

/// Whether a document's status is one it stays in.
fn settled(shown: ShownStatus) -> bool {
    matches!(shown, ShownStatus::Indexing(IndexingStatus::Ready | IndexingStatus::Failed))
}

/// The document at `first`, then each time its status changes, each with the file row its
/// status was read from; ends after a settled status, or with `NOT_FOUND` once the caller
/// may no longer read it (removed, access revoked).
pub fn follow_document(
    app: AppState,
    caller: Principal,
    first: Snapshot,
) -> impl Stream<Item = Result<(document::Model, Option<file::Model>), ApiError>> {
    struct State {
        app: AppState,
        caller: Principal,
        pending: Option<(document::Model, Option<file::Model>)>,
        last: ShownStatus,
        done: bool,
    }
    let (model, file, shown) = first;
    let id = model.id;
    let state = State { app, caller, pending: Some((model, file)), last: shown, done: false };
    futures_util::stream::unfold(state, move |mut state| async move {
        if let Some(model) = state.pending.take() {
            state.done = settled(state.last);
            return Some((Ok(model), state));
        }
        if state.done {
            return None;
        }
        loop {
            tokio::time::sleep(DOCUMENT_POLL).await;
            match readable_document(&state.app, &state.caller, id).await {
                Ok(Some((model, file, shown))) if shown != state.last => {
                    state.last = shown;
                    state.done = settled(shown);
                    return Some((Ok((model, file)), state));
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    state.done = true;
                    return Some((Err(ApiError::NotFound), state));
                }
                // An outage: say so and stop; the client subscribes again.
                Err(error) => {
                    state.done = true;
                    return Some((Err(error), state));
                }
            }
        }
    })
}
