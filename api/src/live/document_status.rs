//! Following an uploaded document's status (`knowledgeDocumentStatus`): the document as it
//! is now, then again at each change of its status, ending at `READY` or `FAILED`. The
//! changes come from the document's one shared reader in this process
//! ([`super::document_watch`]), however many subscriptions follow it.

use entity::{IndexingStatus, knowledge_document as document, knowledge_document_file as file};
use futures_util::Stream;
use sea_orm::DatabaseConnection;
use uuid::Uuid;
use worker::app::feeds;
use worker::knowledge::uploads::ShownStatus;

use super::document_watch::{DocumentFollower, Found, Snapshot, version};
use super::hub::LiveHub;
use crate::error::ApiError;
use worker::app::Principal;
use worker::app::access::space_access;

/// The document, its file and its status, if `caller` may read it.
pub async fn readable_document(
    db: &DatabaseConnection,
    caller: &Principal,
    id: Uuid,
) -> Result<Option<Snapshot>, ApiError> {
    let Some(now) = feeds::document(db, &caller.tenant_id, id).await? else { return Ok(None) };
    if space_access(db, caller, now.0.knowledge_space_id).await?.is_none() {
        return Ok(None);
    }
    Ok(Some(now))
}

/// Whether `caller` may still read the space (`None` when the database could not say).
fn may_read(
    db: sea_orm::DatabaseConnection,
    caller: Principal,
    space: Uuid,
) -> futures_util::future::BoxFuture<'static, Option<bool>> {
    Box::pin(async move { space_access(&db, &caller, space).await.ok().map(|access| access.is_some()) })
}

/// Whether a document's status is one it stays in.
fn settled(shown: ShownStatus) -> bool {
    matches!(shown, ShownStatus::Indexing(IndexingStatus::Ready | IndexingStatus::Failed))
}

/// The document at `first`, then each time its status changes, each with the file row its
/// status was read from; ends after a settled status, or with `NOT_FOUND` once the caller
/// may no longer read it (removed, access revoked). Reads the document's shared watch, not
/// the database ([`super::document_watch`]).
pub fn follow_document(
    hub: &LiveHub,
    db: DatabaseConnection,
    caller: Principal,
    first: Snapshot,
) -> impl Stream<Item = Result<(document::Model, Option<file::Model>), ApiError>> + use<> {
    struct State {
        db: DatabaseConnection,
        caller: Principal,
        follower: DocumentFollower,
        pending: Option<(document::Model, Option<file::Model>)>,
        last: ShownStatus,
        seen: (i32, i64, i64),
        done: bool,
    }
    let follower = hub.follow_document(first.0.id, &caller, may_read);
    let seen = version(&first);
    let (model, file, shown) = first;
    let state = State { db, caller, follower, pending: Some((model, file)), last: shown, seen, done: false };
    futures_util::stream::unfold(state, move |mut state| async move {
        if let Some(model) = state.pending.take() {
            state.done = settled(state.last);
            return Some((Ok(model), state));
        }
        if state.done {
            return None;
        }
        loop {
            // The driver ends only at shutdown: so does the subscription.
            state.follower.receiver.changed().await.ok()?;
            let reading = state.follower.receiver.borrow_and_update().clone();
            if reading.denied.contains(state.follower.key()) {
                state.done = true;
                return Some((Err(ApiError::NotFound), state));
            }
            match reading.found {
                // A reading older than the caller's own first read is no news.
                Found::Present(snapshot) if snapshot.2 != state.last && version(&snapshot) >= state.seen => {
                    // The shared check runs once a second; a change is delivered only to a
                    // caller who may read the space now (changes are few: one read each).
                    let space = snapshot.0.knowledge_space_id;
                    match space_access(&state.db, &state.caller, space).await {
                        Ok(Some(_)) => {}
                        Ok(None) => {
                            state.done = true;
                            return Some((Err(ApiError::NotFound), state));
                        }
                        Err(error) => {
                            state.done = true;
                            return Some((Err(error), state));
                        }
                    }
                    let (model, file, shown) = (*snapshot).clone();
                    state.last = shown;
                    state.seen = version(&snapshot);
                    state.done = settled(shown);
                    return Some((Ok((model, file)), state));
                }
                Found::Present(_) | Found::Pending => {}
                Found::Gone => {
                    state.done = true;
                    return Some((Err(ApiError::NotFound), state));
                }
                // An outage: say so and stop; the client subscribes again.
                Found::Failed => {
                    state.done = true;
                    let cause = anyhow::anyhow!("reading a followed document failed");
                    return Some((Err(ApiError::Unavailable(cause)), state));
                }
            }
        }
    })
}
