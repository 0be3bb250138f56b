//! Mutations on research tasks. Every write goes through `worker::lifecycle`; this file
//! only checks the caller and the input, and maps the outcome.
use async_graphql::{Context, Object};
use chrono::{DateTime, Utc};
use entity::{ResearchMode, now_millis, research_task_job as job};
use uuid::Uuid;
use worker::LifecycleError;
use worker::grant::{GrantRequest, GrantSource};
use worker::lifecycle::{self, NewTask, TaskRef};

use crate::auth::Principal;
use crate::error::{ApiError, IntoGql};
use crate::graphql::access::{SpaceAccess, space_access, visible_task};
use crate::graphql::context::{principal, state};
use crate::graphql::limits::{self, MAX_QUERY_CHARS};
use crate::graphql::types::{CreateResearchTaskInput, ResearchTask};
use crate::state::AppState;
use worker::store::tasks;

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
        let run = async { create_task(state(ctx)?, principal(ctx)?, input).await.map(ResearchTask) };
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
        let run = async {
            limits::text("note", &note, MAX_NOTE_CHARS)?;
            command(ctx, id, expected_row_version, Command::Steer(note)).await
        };
        run.await.gql()
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
        let run = async {
            if let Some(queries) = &sub_queries {
                limits::sub_queries(queries)?;
            }
            command(ctx, id, expected_row_version, Command::ApprovePlan(sub_queries)).await
        };
        run.await.gql()
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
        let run = async {
            limits::text("answer", &answer, MAX_ANSWER_CHARS)?;
            command(ctx, id, expected_row_version, Command::Answer(answer)).await
        };
        run.await.gql()
    }
}

/// The longest steering note, in characters.
const MAX_NOTE_CHARS: usize = 2_000;

/// The longest answer to a clarifying question, in characters.
const MAX_ANSWER_CHARS: usize = 4_000;

/// Creates a task for `caller` from `input`, checked against every limit, in a space the
/// caller belongs to (or its API key is bound to); the GraphQL mutation and the MCP tools
/// both create tasks here.
pub(crate) async fn create_task(
    app: &AppState,
    caller: &Principal,
    input: CreateResearchTaskInput,
) -> Result<job::Model, ApiError> {
    let max_execution_attempts = app.settings.worker.default_max_execution_attempts;
    let task = validated(input, max_execution_attempts)?;
    let source = match space_access(&app.db, caller, task.knowledge_space_id).await? {
        None => return Err(ApiError::NotFound),
        Some(SpaceAccess::Member(member)) => GrantSource::Member { revision: member.revision, role: member.role },
        Some(SpaceAccess::ApiKey(key)) => {
            GrantSource::ApiKey { key_id: key.key_id, revision: key.revision, expires_at: key.expires_at }
        }
    };
    let grant = GrantRequest {
        tenant_id: caller.tenant_id.clone(),
        knowledge_space_id: task.knowledge_space_id,
        subject_id: caller.subject_id.clone(),
        access_channel: caller.channel,
        source,
    };
    let created =
        lifecycle::create(&app.db, &app.notifier, task.into_new(grant, app.settings.quotas()), now_millis()).await?;
    Ok(created.task)
}

/// A task's input, checked against every limit; the grant is the caller's to add.
struct ValidTask {
    knowledge_space_id: Uuid,
    fields: NewTaskFields,
}

/// Everything of a [`NewTask`] but its grant.
struct NewTaskFields {
    query: String,
    mode: Option<ResearchMode>,
    top_k: Option<i32>,
    budget_usd: Option<f64>,
    limits: entity::TaskLimits,
    metadata: serde_json::Value,
    idempotency_key: Option<String>,
    max_execution_attempts: i32,
}

impl ValidTask {
    /// The task to create under `grant`, within the tenant's `quotas`.
    fn into_new(self, grant: GrantRequest, quotas: worker::lifecycle::Quotas) -> NewTask {
        let NewTaskFields { query, mode, top_k, budget_usd, limits, metadata, idempotency_key, max_execution_attempts } =
            self.fields;
        NewTask {
            grant,
            query,
            mode,
            top_k,
            budget_usd,
            limits,
            metadata,
            idempotency_key,
            max_execution_attempts,
            quotas,
        }
    }
}

/// The input checked against every limit. New tasks get `max_execution_attempts` claims
/// (the worker settings' `default_max_execution_attempts`).
fn validated(input: CreateResearchTaskInput, max_execution_attempts: i32) -> Result<ValidTask, ApiError> {
    limits::text("query", &input.query, MAX_QUERY_CHARS)?;
    let fields = NewTaskFields {
        query: input.query,
        mode: input.mode.map(ResearchMode::from),
        top_k: limits::top_k(input.top_k)?,
        budget_usd: limits::budget(input.budget_usd)?,
        limits: limits::task_limits(limits::with_filters(input.limits, input.filters.as_ref().map(|f| f.to_json()))?)?,
        metadata: limits::json_object("metadata", input.metadata)?,
        idempotency_key: limits::idempotency_key(input.idempotency_key)?,
        max_execution_attempts,
    };
    Ok(ValidTask { knowledge_space_id: input.knowledge_space_id, fields })
}

/// A lifecycle command and its argument.
pub(crate) enum Command {
    Cancel,
    Pause(Option<i64>),
    Resume,
    Steer(String),
    ApprovePlan(Option<Vec<String>>),
    Answer(String),
}

/// Runs a command on a task the caller may see; a task they may not see (another
/// subject's, or one whose grant died) answers `NOT_FOUND`.
async fn command(
    ctx: &Context<'_>,
    id: Uuid,
    expected: Option<i32>,
    command: Command,
) -> Result<ResearchTask, ApiError> {
    run_command(state(ctx)?, principal(ctx)?, id, expected, command).await.map(ResearchTask)
}

/// Runs a command on a task `caller` may see (the GraphQL mutations and the MCP tools).
pub(crate) async fn run_command(
    app: &AppState,
    caller: &Principal,
    id: Uuid,
    expected: Option<i32>,
    command: Command,
) -> Result<job::Model, ApiError> {
    visible_task(&app.db, caller, id).await?.ok_or(ApiError::NotFound)?;
    let task = TaskRef {
        id,
        tenant_id: caller.tenant_id.clone(),
        subject_id: caller.subject_id.clone(),
        expected_row_version: expected,
    };
    let outcome = match command {
        Command::Cancel => lifecycle::cancel(&app.db, &app.notifier, &task, now_millis()).await,
        Command::Pause(resume_after) => {
            lifecycle::pause(&app.db, &app.notifier, &task, resume_after, now_millis()).await
        }
        Command::Resume => lifecycle::resume(&app.db, &app.notifier, &task, now_millis()).await,
        Command::Steer(note) => lifecycle::steer(&app.db, &app.notifier, &task, &note, now_millis()).await,
        Command::ApprovePlan(queries) => {
            lifecycle::approve_plan(&app.db, &app.notifier, &task, queries, now_millis()).await
        }
        Command::Answer(text) => {
            lifecycle::answer_clarification(&app.db, &app.notifier, &task, text, now_millis()).await
        }
    };
    match outcome {
        Ok(updated) => Ok(updated),
        Err(
            error @ (LifecycleError::StaleRowVersion { .. }
            | LifecycleError::NotAllowed { .. }
            | LifecycleError::NotAwaiting { .. }),
        ) => Err(with_current(app, id, error).await),
        Err(error) => Err(error.into()),
    }
}

/// A conflict carrying the task's stage and row version as they are now, so the client
/// can decide what to do without another round trip.
async fn with_current(app: &AppState, id: Uuid, error: LifecycleError) -> ApiError {
    let current: Option<job::Model> = tasks::find(&app.db, id).await.ok().flatten();
    match (ApiError::from(error), current) {
        (ApiError::Conflict { message, .. }, Some(task)) => {
            ApiError::Conflict { message, current_stage: Some(task.stage), row_version: Some(task.row_version) }
        }
        (other, _) => other,
    }
}
