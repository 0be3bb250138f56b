//! `ResearchTask`: every column of its row except the lease internals, plus its journal
//! and its answer.
use async_graphql::{Context, Json, Object};
use chrono::{DateTime, Utc};
use entity::research_task_job as job;
use serde_json::Value;
use uuid::Uuid;

use super::{
    AnswerTrace, ResearchTaskAwaiting, ResearchTaskNote, ResearchTaskPartialResult, ResearchTaskProgressEvent, datetime,
};
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::state;
use crate::graphql::enums::{GqlChannel, GqlMode, GqlStage};
use crate::graphql::loaders::{
    JournalPage, NotesOfTask, PartialPage, ProgressPage, RequestLoaders, ThreadOfTask, TraceOfTask, WaitsOfTask, loaded,
};
use worker::app::limits::{MAX_PAGE, after_sequence, page_size};
use worker::app::tasks;

/// A research task. Only the subject that created it sees it, and only while its grant holds.
pub struct ResearchTask(pub job::Model);

/// A research task. Only the subject that created it sees it, and only while its grant holds.
#[Object]
impl ResearchTask {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn knowledge_space_id(&self) -> Uuid {
        self.0.knowledge_space_id
    }
    async fn query(&self) -> &str {
        &self.0.query
    }
    async fn mode(&self) -> Option<GqlMode> {
        self.0.mode.map(Into::into)
    }
    async fn top_k(&self) -> Option<i32> {
        self.0.top_k
    }
    async fn budget_usd(&self) -> Option<f64> {
        self.0.budget_usd
    }
    /// The limits it runs under, as `createResearchTask` accepted them (keys left at their
    /// default are left out).
    async fn limits(&self) -> Json<Value> {
        Json(self.0.limits.clone())
    }
    async fn metadata(&self) -> Json<Value> {
        Json(self.0.metadata.clone())
    }
    /// What the engine spent so far.
    async fn cost(&self) -> Json<Value> {
        Json(self.0.cost.clone())
    }
    async fn stage(&self) -> GqlStage {
        self.0.stage.into()
    }
    /// The stage a paused task returns to on resume.
    async fn paused_from_stage(&self) -> Option<GqlStage> {
        self.0.paused_from_stage.map(Into::into)
    }
    async fn error(&self) -> Option<&str> {
        self.0.error.as_deref()
    }
    /// When a paused task resumes by itself.
    async fn resume_after(&self) -> Option<DateTime<Utc>> {
        self.0.resume_after.map(datetime)
    }
    async fn paused_at(&self) -> Option<DateTime<Utc>> {
        self.0.paused_at.map(datetime)
    }
    async fn completed_at(&self) -> Option<DateTime<Utc>> {
        self.0.completed_at.map(datetime)
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        datetime(self.0.updated_at)
    }
    /// Increases on every change; pass it as `expectedRowVersion` to act only on what you saw.
    async fn row_version(&self) -> i32 {
        self.0.row_version
    }
    async fn execution_attempts(&self) -> i32 {
        self.0.execution_attempts
    }
    async fn max_execution_attempts(&self) -> i32 {
        self.0.max_execution_attempts
    }
    /// How the creator reached the service.
    async fn access_channel(&self) -> GqlChannel {
        self.0.access_channel.into()
    }

    /// Progress events after `afterSequence` (default 0), in sequence order, at most
    /// `first` (default and maximum 100).
    #[graphql(complexity = "first.unwrap_or(MAX_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn progress_events(
        &self,
        ctx: &Context<'_>,
        #[graphql(name = "afterSequence")] after: Option<i32>,
        first: Option<i32>,
    ) -> async_graphql::Result<Vec<ResearchTaskProgressEvent>> {
        let run = async {
            let (after, size) = (after_sequence(after)?, page_size(first, MAX_PAGE)?);
            let rows = match ctx.data_opt::<RequestLoaders>() {
                Some(loaders) => {
                    let page = ProgressPage(JournalPage { task: self.0.id, after, size });
                    loaders.load_one(page).await.map_err(loaded)?.unwrap_or_default()
                }
                None => tasks::progress_events(&state(ctx)?.app, &self.0, after, size).await?,
            };
            Ok::<_, ApiError>(rows.into_iter().map(ResearchTaskProgressEvent).collect())
        };
        run.await.gql()
    }

    /// Partial results (evidence bundles) after `afterSequence` (default 0), in sequence
    /// order, at most `first` (default and maximum 100).
    #[graphql(complexity = "first.unwrap_or(MAX_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn partial_results(
        &self,
        ctx: &Context<'_>,
        #[graphql(name = "afterSequence")] after: Option<i32>,
        first: Option<i32>,
    ) -> async_graphql::Result<Vec<ResearchTaskPartialResult>> {
        let run = async {
            let (after, size) = (after_sequence(after)?, page_size(first, MAX_PAGE)?);
            let rows = match ctx.data_opt::<RequestLoaders>() {
                Some(loaders) => {
                    let page = PartialPage(JournalPage { task: self.0.id, after, size });
                    loaders.load_one(page).await.map_err(loaded)?.unwrap_or_default()
                }
                None => tasks::partial_results(&state(ctx)?.app, &self.0, after, size).await?,
            };
            Ok::<_, ApiError>(rows.into_iter().map(ResearchTaskPartialResult).collect())
        };
        run.await.gql()
    }

    /// The research thread this task is a turn of; null outside a thread.
    async fn thread_id(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<Uuid>> {
        let run = async {
            Ok::<_, ApiError>(match ctx.data_opt::<RequestLoaders>() {
                Some(loaders) => loaders.load_one(ThreadOfTask(self.0.id)).await.map_err(loaded)?,
                None => {
                    let db = &state(ctx)?.db;
                    worker::app::batches::threads_of_tasks(db, &[self.0.id]).await?.remove(&self.0.id)
                }
            })
        };
        run.await.gql()
    }

    /// Guidance added with `steerResearchTask`, oldest first (at most 8).
    async fn steering_notes(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<ResearchTaskNote>> {
        let run = async {
            let notes = match ctx.data_opt::<RequestLoaders>() {
                Some(loaders) => loaders.load_one(NotesOfTask(self.0.id)).await.map_err(loaded)?.unwrap_or_default(),
                None => tasks::notes(&state(ctx)?.app, &self.0).await?,
            };
            Ok::<_, ApiError>(notes.into_iter().map(ResearchTaskNote).collect())
        };
        run.await.gql()
    }

    /// What the task waits for from a person (a plan approval, an answer to a clarifying
    /// question), while it is paused for it; null otherwise.
    async fn awaiting(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<ResearchTaskAwaiting>> {
        if self.0.stage != entity::Stage::Paused || !entity::TaskLimits::from_stored(&self.0.limits).may_wait() {
            return Ok(None);
        }
        let run = async {
            let waits = match ctx.data_opt::<RequestLoaders>() {
                Some(loaders) => loaders.load_one(WaitsOfTask(self.0.id)).await.map_err(loaded)?.unwrap_or_default(),
                None => tasks::waits(&state(ctx)?.app, &self.0).await?,
            };
            Ok::<_, ApiError>(waits.into_iter().find(|wait| wait.is_open()).map(ResearchTaskAwaiting))
        };
        run.await.gql()
    }

    /// The answer, once the task completed.
    async fn answer_trace(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<AnswerTrace>> {
        let run = async {
            let found = match ctx.data_opt::<RequestLoaders>() {
                Some(loaders) => {
                    let key = TraceOfTask {
                        task: self.0.id,
                        tenant_id: self.0.tenant_id.clone(),
                        subject_id: self.0.subject_id.clone(),
                    };
                    loaders.load_one(key).await.map_err(loaded)?
                }
                None => tasks::answer_trace(&state(ctx)?.app, &self.0).await?,
            };
            Ok::<_, ApiError>(found.map(AnswerTrace))
        };
        run.await.gql()
    }
}
