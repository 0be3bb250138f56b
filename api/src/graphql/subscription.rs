//! The Subscription root: a task's progress events and partial results, replayed from the
//! database after `afterSequence` and then followed live (see `live::follow`), and its
//! answer as it is written (see `live::answer`).
use async_graphql::{Context, Subscription};
use futures_util::{Stream, StreamExt};
use uuid::Uuid;

use super::context::{principal, state};
use super::types::{
    KnowledgeDocument, ResearchTaskAnswerDelta, ResearchTaskPartialResult, ResearchTaskProgressEvent,
    ResearchThreadEvent,
};
use crate::error::{ApiError, IntoGql, ToGql as _};
use crate::live::{JournalRow, follow, follow_answer, follow_document, follow_thread, readable_document};
use worker::app::access::visible_task;
use worker::app::limits::{after_offset, after_sequence};

/// Live feeds.
pub struct SubscriptionRoot;

#[Subscription(name = "Subscription")]
impl SubscriptionRoot {
    /// Every progress event after `afterSequence`, each exactly once and in order; ends
    /// after the event that makes the task terminal, or with an error when the caller's
    /// grant stops holding.
    async fn research_task_progress(
        &self,
        ctx: &Context<'_>,
        task_id: Uuid,
        #[graphql(default = 0)] after_sequence: Option<i32>,
    ) -> async_graphql::Result<impl Stream<Item = async_graphql::Result<ResearchTaskProgressEvent>> + use<>> {
        Box::pin(start(ctx, task_id, after_sequence))
            .await
            .gql()
            .map(|rows| counted("progress", rows.map(|row| row.map(ResearchTaskProgressEvent))))
    }

    /// Every partial result after `afterSequence`, each exactly once and in order; ends once
    /// the task is terminal and everything it wrote was delivered.
    async fn research_task_partial_results(
        &self,
        ctx: &Context<'_>,
        task_id: Uuid,
        #[graphql(default = 0)] after_sequence: Option<i32>,
    ) -> async_graphql::Result<impl Stream<Item = async_graphql::Result<ResearchTaskPartialResult>> + use<>> {
        Box::pin(start(ctx, task_id, after_sequence))
            .await
            .gql()
            .map(|rows| counted("partial_results", rows.map(|row| row.map(ResearchTaskPartialResult))))
    }

    /// The answer as it is written: everything after `afterOffset` code points written so
    /// far, then each new part as the worker checks its citations. A delta with
    /// `reset: true` means generation started over (discard what you have; it starts at
    /// offset 0). The last message has `done: true`, once the answer trace is committed;
    /// the deltas since the last reset then concatenate exactly to its `answer`. A task
    /// that ends without an answer (failed, canceled) completes the stream without `done`.
    async fn research_task_answer(
        &self,
        ctx: &Context<'_>,
        task_id: Uuid,
        #[graphql(default = 0)] after_offset: Option<i32>,
    ) -> async_graphql::Result<impl Stream<Item = async_graphql::Result<ResearchTaskAnswerDelta>> + use<>> {
        Box::pin(start_answer(ctx, task_id, after_offset)).await.gql().map(|deltas| counted("answer", deltas))
    }

    /// Every progress event of every turn of a research thread of yours, turn after turn
    /// (oldest first), each turn's events exactly once and in order as
    /// `researchTaskProgress` delivers them (replayed, then live). From the first turn
    /// without `afterCursor`; after an event's `cursor` with it. Stays open while the
    /// thread exists, waiting for new turns: deleting it completes the stream, losing its
    /// space ends it with FORBIDDEN, and an expired credential with UNAUTHENTICATED. Turns
    /// you may no longer read are passed over. Another's thread is NOT_FOUND.
    async fn research_thread_events(
        &self,
        ctx: &Context<'_>,
        thread_id: Uuid,
        after_cursor: Option<String>,
    ) -> async_graphql::Result<impl Stream<Item = async_graphql::Result<ResearchThreadEvent>> + use<>> {
        let start = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let after = after_cursor.as_deref().map(ResearchThreadEvent::decode).transpose()?;
            worker::app::threads::find(&app.app, caller, thread_id).await?.ok_or(ApiError::NotFound)?;
            let events = follow_thread(app.app.clone(), &app.live, caller.clone(), thread_id, after);
            Ok::<_, ApiError>(events.map(|event| {
                event.map(|(position, event)| ResearchThreadEvent { position, event }).map_err(|error| error.to_gql())
            }))
        };
        Box::pin(start).await.gql().map(|events| counted("thread_events", events))
    }

    /// A document as it is now, then again each time its `indexingStatus` changes
    /// (an upload goes `EXTRACTING`, `SPLITTING`, then `PENDING` while embeddings come, and
    /// `READY`); completes after `READY` or `FAILED`. A document the caller may not read
    /// answers `NOT_FOUND`, as a missing id does (also when access ends while it runs).
    async fn knowledge_document_status(
        &self,
        ctx: &Context<'_>,
        document_id: Uuid,
    ) -> async_graphql::Result<impl Stream<Item = async_graphql::Result<KnowledgeDocument>> + use<>> {
        let start = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let first = readable_document(&app.db, caller, document_id).await?.ok_or(ApiError::NotFound)?;
            let documents = follow_document(&app.live, app.db.clone(), caller.clone(), first);
            Ok::<_, ApiError>(documents.map(|document| {
                document.map(|(row, file)| KnowledgeDocument::with_file(row, file)).map_err(|error| error.to_gql())
            }))
        };
        Box::pin(start).await.gql().map(|documents| counted("document_status", documents))
    }
}

/// Checks the caller may see the task (else `NOT_FOUND`, as for a missing id) and starts
/// following its answer.
async fn start_answer(
    ctx: &Context<'_>,
    task_id: Uuid,
    after: Option<i32>,
) -> Result<impl Stream<Item = async_graphql::Result<ResearchTaskAnswerDelta>> + use<>, ApiError> {
    let (caller, app) = (principal(ctx)?, state(ctx)?);
    let after = after_offset(after)?;
    visible_task(&app.db, caller, task_id).await?.ok_or(ApiError::NotFound)?;
    let deltas = follow_answer(&app.live, &app.db, caller.clone(), task_id, after);
    Ok(deltas.map(|delta| delta.map(ResearchTaskAnswerDelta::from).map_err(|error| error.to_gql())))
}

/// The stream, counted in `subscriptions_active{kind}` for as long as it lives.
fn counted<S: Stream>(kind: &'static str, stream: S) -> impl Stream<Item = S::Item> {
    let open = crate::gauges::Counted::new("subscriptions_active", kind);
    stream.map(move |item| {
        let _open = &open;
        item
    })
}

/// Checks the caller may see the task (else `NOT_FOUND`, as for a missing id) and starts
/// the feed. The resolvers box this future: async-graphql keeps the resolver's future
/// beside the stream it returns, so its database read would otherwise be part of what
/// every open subscription holds.
async fn start<R: JournalRow>(
    ctx: &Context<'_>,
    task_id: Uuid,
    after: Option<i32>,
) -> Result<impl Stream<Item = async_graphql::Result<R>> + use<R>, ApiError> {
    let (caller, app) = (principal(ctx)?, state(ctx)?);
    let after = after_sequence(after)?;
    visible_task(&app.db, caller, task_id).await?.ok_or(ApiError::NotFound)?;
    let rows = follow::<R>(&app.live, &app.db, caller.clone(), task_id, after);
    Ok(rows.map(|row| row.map_err(|error| error.to_gql())))
}
