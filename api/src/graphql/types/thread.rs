//! `ResearchThread`: a conversation of research tasks (`createResearchThread`), each turn a
//! task created with its id.
use async_graphql::connection::Connection;
use async_graphql::{Context, Json, Object};
use chrono::{DateTime, Utc};
use entity::research_thread as thread;
use serde_json::Value;
use uuid::Uuid;

use super::{ResearchTask, datetime};
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::state;
use crate::graphql::relay;
use worker::app::limits::{DEFAULT_PAGE, MAX_PAGE};
use worker::app::threads;

/// A research thread. Only the subject that created it sees it, and only while they may
/// read its space; anyone else's answers as a missing one does.
pub struct ResearchThread(pub thread::Model);

/// A research thread. Only the subject that created it sees it, and only while they may
/// read its space; anyone else's answers as a missing one does.
#[Object]
impl ResearchThread {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    /// The space every turn researches.
    async fn knowledge_space_id(&self) -> Uuid {
        self.0.knowledge_space_id
    }
    /// Its title, if it has one.
    async fn title(&self) -> Option<&str> {
        self.0.title.as_deref()
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
    /// When it last changed: updated, or a turn added.
    async fn updated_at(&self) -> DateTime<Utc> {
        datetime(self.0.updated_at)
    }
    /// Your own data, as you gave it.
    async fn metadata(&self) -> Json<Value> {
        Json(self.0.metadata.clone())
    }
    /// Its turns, oldest first: only those you may read now.
    #[graphql(complexity = "first.unwrap_or(DEFAULT_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn tasks(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<Connection<String, ResearchTask>> {
        let run = async {
            let app = &state(ctx)?.app;
            let args = relay::parse(first, after)?;
            let listed = threads::turns(app, &self.0, args).await?;
            Ok::<_, ApiError>(relay::listed(&args, listed, threads::turn_key, ResearchTask))
        };
        run.await.gql()
    }
}

/// One progress event of a turn of a followed thread.
pub struct ResearchThreadEvent {
    /// Where the stream stands after it.
    pub position: crate::live::ThreadPosition,
    /// The event.
    pub event: entity::research_task_progress_event::Model,
}

impl ResearchThreadEvent {
    /// The opaque cursor of a position.
    pub fn encode(position: crate::live::ThreadPosition) -> String {
        use async_graphql::connection::{CursorType as _, OpaqueCursor};
        OpaqueCursor((position.turn_at, position.task_id, position.sequence)).encode_cursor()
    }

    /// A cursor made by [`ResearchThreadEvent::encode`]; anything else is bad input.
    pub fn decode(cursor: &str) -> Result<crate::live::ThreadPosition, ApiError> {
        use async_graphql::connection::{CursorType as _, OpaqueCursor};
        let OpaqueCursor((turn_at, task_id, sequence)) = OpaqueCursor::<(i64, Uuid, i32)>::decode_cursor(cursor)
            .map_err(|_| ApiError::bad_input("afterCursor is not a cursor of researchThreadEvents"))?;
        if sequence < 0 {
            return Err(ApiError::bad_input("afterCursor is not a cursor of researchThreadEvents"));
        }
        Ok(crate::live::ThreadPosition { turn_at, task_id, sequence })
    }
}

/// One progress event of a turn of a followed thread.
#[Object]
impl ResearchThreadEvent {
    /// Resume after this event with `researchThreadEvents(afterCursor:)`.
    async fn cursor(&self) -> String {
        Self::encode(self.position)
    }
    /// The turn (task) it belongs to.
    async fn task_id(&self) -> Uuid {
        self.position.task_id
    }
    /// The event, as `researchTaskProgress` delivers it.
    async fn event(&self) -> super::ResearchTaskProgressEvent {
        super::ResearchTaskProgressEvent(self.event.clone())
    }
}
