//! Mutations on research threads: each parses its arguments, calls one operation of
//! `worker::app::threads` and renders the thread.
use async_graphql::{Context, MaybeUndefined, Object};
use uuid::Uuid;
use worker::app::threads::{self, ThreadChanges, ThreadRequest};

use crate::error::IntoGql;
use crate::graphql::context::{actor, principal, state};
use crate::graphql::types::{CreateResearchThreadInput, ResearchThread, UpdateResearchThreadInput};

/// Research thread mutations.
#[derive(Default)]
pub struct ThreadMutation;

#[Object]
impl ThreadMutation {
    /// Starts a research thread in a space you may read: a conversation whose turns are
    /// tasks created with its id (`createResearchTask(input: {threadId})`).
    async fn create_research_thread(
        &self,
        ctx: &Context<'_>,
        input: CreateResearchThreadInput,
    ) -> async_graphql::Result<ResearchThread> {
        let run = async {
            let request = ThreadRequest {
                knowledge_space_id: input.knowledge_space_id,
                title: input.title,
                metadata: input.metadata.map(|metadata| metadata.0),
            };
            threads::create(&state(ctx)?.app, principal(ctx)?, request).await.map(ResearchThread)
        };
        run.await.gql()
    }

    /// Changes your thread's title or metadata; a field left out keeps its value. Anyone
    /// else's id answers NOT_FOUND.
    async fn update_research_thread(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
        input: UpdateResearchThreadInput,
    ) -> async_graphql::Result<ResearchThread> {
        let run = async {
            let title = match input.title {
                MaybeUndefined::Undefined => None,
                MaybeUndefined::Null => Some(None),
                MaybeUndefined::Value(title) => Some(Some(title)),
            };
            let changes = ThreadChanges { title, metadata: input.metadata.map(|metadata| metadata.0) };
            threads::update(&state(ctx)?.app, principal(ctx)?, id, changes).await.map(ResearchThread)
        };
        run.await.gql()
    }

    /// Deletes your thread and its turns, each as `deleteResearchTask` deletes a task
    /// (recorded `research_task.deleted`), then the thread (`research_thread.deleted`).
    /// Anyone else's id answers NOT_FOUND.
    async fn delete_research_thread(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<bool> {
        let run = async { threads::delete(&state(ctx)?.app, actor(ctx)?, id).await.map(|()| true) };
        run.await.gql()
    }
}
