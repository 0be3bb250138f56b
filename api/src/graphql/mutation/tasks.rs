//! Mutations on research tasks: each parses its arguments, calls one operation of
//! `worker::app::tasks` and renders the task.
use async_graphql::{Context, Object};
use chrono::{DateTime, Utc};
use uuid::Uuid;
use worker::app::limits;
use worker::app::tasks::{self, Command};

use crate::error::{ApiError, IntoGql};
use crate::graphql::context::{principal, state};
use crate::graphql::types::{CreateResearchTaskInput, ResearchTask};

/// Research task mutations.
#[derive(Default)]
pub struct TaskMutation;

#[Object]
impl TaskMutation {
    /// Starts a research task in a space the caller belongs to (or its API key is bound
    /// to). Repeating the request with the same `idempotencyKey` returns the same task.
    async fn create_research_task(
        &self,
        ctx: &Context<'_>,
        input: CreateResearchTaskInput,
    ) -> async_graphql::Result<ResearchTask> {
        let run = async {
            let (state, caller) = (state(ctx)?, principal(ctx)?);
            tasks::create(&state.app, caller, input.into_request()).await.map(ResearchTask)
        };
        run.await.gql()
    }

    /// Cancels the task for good (a wait for a person ends with it).
    async fn cancel_research_task(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
        expected_row_version: Option<i32>,
    ) -> async_graphql::Result<ResearchTask> {
        command(ctx, id, expected_row_version, Command::Cancel).await.gql()
    }

    /// Pauses the task; with `resumeAfter` (in the future) it resumes by itself then.
    async fn pause_research_task(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
        expected_row_version: Option<i32>,
        resume_after: Option<DateTime<Utc>>,
    ) -> async_graphql::Result<ResearchTask> {
        let run = async {
            let resume_after = limits::future("resumeAfter", resume_after)?;
            command(ctx, id, expected_row_version, Command::Pause(resume_after)).await
        };
        run.await.gql()
    }

    /// Resumes a paused task where it stopped. A task waiting for a person goes on without
    /// the input: plan approval with the plan as proposed, a clarification unanswered.
    async fn resume_research_task(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
        expected_row_version: Option<i32>,
    ) -> async_graphql::Result<ResearchTask> {
        command(ctx, id, expected_row_version, Command::Resume).await.gql()
    }

    /// Adds guidance to a task that is queued, running or paused: the next round's
    /// decision and the answer take every note into account (a round's `STAGE_CHANGED`
    /// payload says how many as `notes_applied`). `note` is 1 to 2,000 characters; a task
    /// takes at most 8 notes (a 9th is BAD_USER_INPUT); a finished task is CONFLICT, and
    /// so is a task in GENERATING (its answer is already being written; no note reaches
    /// it). Bumps
    /// `rowVersion`. Who may cancel the task may steer it.
    async fn steer_research_task(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
        note: String,
        expected_row_version: Option<i32>,
    ) -> async_graphql::Result<ResearchTask> {
        command(ctx, id, expected_row_version, Command::Steer(note)).await.gql()
    }

    /// Approves the plan of a task waiting for plan approval (`awaiting.reason` is
    /// PLAN_APPROVAL) and resumes it: round 1 searches `subQueries` as given (1 to 16, each
    /// checked like a query, and within `limits.max_sub_queries`), or the plan as proposed
    /// when `subQueries` is null; later rounds may add sub-queries of their own. A task
    /// that waits for something else, or for nothing, is CONFLICT naming what it waits for.
    /// Bumps `rowVersion`; with the same `expectedRowVersion` twice, the second is CONFLICT.
    async fn approve_research_plan(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
        sub_queries: Option<Vec<String>>,
        expected_row_version: Option<i32>,
    ) -> async_graphql::Result<ResearchTask> {
        command(ctx, id, expected_row_version, Command::ApprovePlan(sub_queries)).await.gql()
    }

    /// Answers the clarifying question of a task waiting for one (`awaiting.reason` is
    /// CLARIFICATION) and resumes it: the answer (1 to 4,000 characters) becomes part of
    /// what the plan and the answer are written from. A task that waits for something else,
    /// or for nothing, is CONFLICT naming what it waits for. Bumps `rowVersion`.
    async fn answer_research_clarification(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
        answer: String,
        expected_row_version: Option<i32>,
    ) -> async_graphql::Result<ResearchTask> {
        command(ctx, id, expected_row_version, Command::Answer(answer)).await.gql()
    }
}

/// Runs a command on a task the caller may see (`worker::app::tasks::run`).
async fn command(
    ctx: &Context<'_>,
    id: Uuid,
    expected: Option<i32>,
    command: Command,
) -> Result<ResearchTask, ApiError> {
    tasks::run(&state(ctx)?.app, principal(ctx)?, id, expected, command).await.map(ResearchTask)
}
