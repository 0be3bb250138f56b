//! Research tasks: creating one, and the commands on one (cancel, pause, resume, steer,
//! approve a plan, answer a clarification). Every write goes through `crate::lifecycle`.
use entity::{ResearchMode, now_millis, research_task_job as job};
use serde_json::Value;
use uuid::Uuid;

use super::access::{SpaceAccess, space_access, visible_task};
use super::limits::{self, MAX_QUERY_CHARS};
use super::{App, AppError, Principal};
use crate::grant::{GrantRequest, GrantSource};
use crate::lifecycle::{self, LifecycleError, NewTask, TaskRef};
use crate::store::tasks;

/// A task to create, as a channel received it (nothing checked yet).
#[derive(Debug, Clone, Default)]
pub struct TaskRequest {
    /// The space to research in.
    pub knowledge_space_id: Uuid,
    /// The research question.
    pub query: String,
    /// The research mode (the default when absent).
    pub mode: Option<ResearchMode>,
    /// How many passages to rank.
    pub top_k: Option<i32>,
    /// The most the task may spend, in US dollars.
    pub budget_usd: Option<f64>,
    /// The task's `limits` object.
    pub limits: Option<Value>,
    /// Filters given beside the limits (stored as `limits.filters`).
    pub filters: Option<Value>,
    /// The client's metadata object.
    pub metadata: Option<Value>,
    /// Makes a repeated request return the same task.
    pub idempotency_key: Option<String>,
    /// The thread the task is a turn of (the caller's, in the same space).
    pub thread_id: Option<Uuid>,
    /// What to do when the thread has an unfinished turn (`ENQUEUE` when absent).
    pub multitask_strategy: Option<super::threads::MultitaskStrategy>,
    /// Start a new thread with this task as its first turn (not with `thread_id`).
    pub new_thread: bool,
}

/// A created task, and the thread it is a turn of.
#[derive(Debug, Clone)]
pub struct Started {
    /// The task.
    pub task: job::Model,
    /// Its thread, if it is a turn.
    pub thread_id: Option<Uuid>,
}

/// The longest steering note, in characters.
pub const MAX_NOTE_CHARS: usize = 2_000;

/// The longest answer to a clarifying question, in characters.
pub const MAX_ANSWER_CHARS: usize = 4_000;

/// Creates a task for `caller` from `request`, checked against every limit, in a space the
/// caller belongs to (or its API key is bound to). Repeating a request with the same
/// idempotency key returns the same task.
pub async fn create(app: &App, caller: &Principal, request: TaskRequest) -> Result<job::Model, AppError> {
    Ok(start(app, caller, request).await?.task)
}

/// [`create`], answering the thread the task is a turn of too: the one named, or the one
/// `new_thread` started (removed again, unused, when the task is then refused).
pub async fn start(app: &App, caller: &Principal, request: TaskRequest) -> Result<Started, AppError> {
    let (named, strategy) = (request.thread_id, request.multitask_strategy.unwrap_or_default());
    let new_thread = request.new_thread;
    if new_thread && named.is_some() {
        return Err(AppError::bad_input("threadId and newThread exclude each other"));
    }
    let fields = validated(request, app.rules.max_execution_attempts)?;
    let source = match space_access(&app.db, caller, fields.knowledge_space_id).await? {
        None => return Err(AppError::NotFound),
        Some(SpaceAccess::Member(member)) => GrantSource::Member { revision: member.revision, role: member.role },
        Some(SpaceAccess::ApiKey(key)) => {
            GrantSource::ApiKey { key_id: key.key_id, revision: key.revision, expires_at: key.expires_at }
        }
    };
    let grant = GrantRequest {
        tenant_id: caller.tenant_id.clone(),
        knowledge_space_id: fields.knowledge_space_id,
        subject_id: caller.subject_id.clone(),
        access_channel: caller.channel,
        source,
    };
    let thread_id = if new_thread {
        let request =
            super::threads::ThreadRequest { knowledge_space_id: fields.knowledge_space_id, ..Default::default() };
        Some(super::threads::create(app, caller, request).await?.id)
    } else {
        named
    };
    let created = async {
        let thread = match thread_id {
            Some(id) => {
                // A repeated key names its turn: the strategy never acts on it.
                let replay = fields.idempotency_key.as_deref().map(|key| lifecycle::key_task_id(&grant, key, Some(id)));
                let turn =
                    super::threads::NextTurn { thread_id: id, space_id: fields.knowledge_space_id, strategy, replay };
                Some(super::threads::prepare_turn(app, caller, turn).await?)
            }
            None => None,
        };
        let input = NewTask { thread, ..fields.into_new(grant, app.rules.quotas) };
        Ok::<_, AppError>(lifecycle::create(&app.db, &app.notifier, input, now_millis()).await?.task)
    }
    .await;
    match created {
        Ok(task) => Ok(Started { task, thread_id }),
        Err(error) => {
            if new_thread && let Some(id) = thread_id {
                // Never shown to anyone: no audit record.
                if let Err(cleanup) = super::threads::discard_unused(app, caller, id).await {
                    tracing::warn!(error = %cleanup, "a refused task's new thread could not be removed");
                }
            }
            Err(error)
        }
    }
}

/// A task's input checked against every limit; the grant is the caller's to add.
struct ValidTask {
    knowledge_space_id: Uuid,
    query: String,
    mode: Option<ResearchMode>,
    top_k: Option<i32>,
    budget_usd: Option<f64>,
    limits: entity::TaskLimits,
    metadata: Value,
    idempotency_key: Option<String>,
    max_execution_attempts: i32,
}

impl ValidTask {
    /// The task to create under `grant`, within the tenant's `quotas`.
    fn into_new(self, grant: GrantRequest, quotas: lifecycle::Quotas) -> NewTask {
        NewTask {
            grant,
            query: self.query,
            mode: self.mode,
            top_k: self.top_k,
            budget_usd: self.budget_usd,
            limits: self.limits,
            metadata: self.metadata,
            idempotency_key: self.idempotency_key,
            max_execution_attempts: self.max_execution_attempts,
            quotas,
            thread: None,
        }
    }
}

/// The request checked against every limit. New tasks get `max_execution_attempts` claims.
fn validated(request: TaskRequest, max_execution_attempts: i32) -> Result<ValidTask, AppError> {
    limits::text("query", &request.query, MAX_QUERY_CHARS)?;
    Ok(ValidTask {
        knowledge_space_id: request.knowledge_space_id,
        query: request.query,
        mode: request.mode,
        top_k: limits::top_k(request.top_k)?,
        budget_usd: limits::budget(request.budget_usd)?,
        limits: limits::task_limits(limits::with_filters(request.limits, request.filters)?)?,
        metadata: limits::json_object("metadata", request.metadata)?,
        idempotency_key: limits::idempotency_key(request.idempotency_key)?,
        max_execution_attempts,
    })
}

/// A command on a task, with its argument.
#[derive(Debug, Clone)]
pub enum Command {
    /// Cancel the task for good (a wait for a person ends with it).
    Cancel,
    /// Pause it, to resume by itself at the instant given (epoch ms), if one is.
    Pause(Option<i64>),
    /// Resume a paused task where it stopped.
    Resume,
    /// Add a steering note.
    Steer(String),
    /// Approve the plan, with the sub-queries to search instead of the proposed ones.
    ApprovePlan(Option<Vec<String>>),
    /// Answer the clarifying question.
    Answer(String),
}

impl Command {
    /// The command's own input checked against its limits (a note's and an answer's
    /// length, an approved plan's sub-queries).
    fn check(&self) -> Result<(), AppError> {
        match self {
            Self::Steer(note) => limits::text("note", note, MAX_NOTE_CHARS),
            Self::Answer(answer) => limits::text("answer", answer, MAX_ANSWER_CHARS),
            Self::ApprovePlan(Some(queries)) => limits::sub_queries(queries),
            Self::Cancel | Self::Pause(_) | Self::Resume | Self::ApprovePlan(None) => Ok(()),
        }
    }
}

/// Runs `command` on a task `caller` may see; a task they may not see (another subject's,
/// or one whose grant died) answers `NOT_FOUND`, as a random id does. With
/// `expected_row_version`, a task that moved on since is CONFLICT carrying its stage and
/// row version as they are now.
pub async fn run(
    app: &App,
    caller: &Principal,
    id: Uuid,
    expected_row_version: Option<i32>,
    command: Command,
) -> Result<job::Model, AppError> {
    command.check()?;
    visible_task(&app.db, caller, id).await?.ok_or(AppError::NotFound)?;
    let task = TaskRef {
        id,
        tenant_id: caller.tenant_id.clone(),
        subject_id: caller.subject_id.clone(),
        expected_row_version,
    };
    let (db, notifier, now) = (&app.db, &app.notifier, now_millis());
    let outcome = match command {
        Command::Cancel => lifecycle::cancel(db, notifier, &task, now).await,
        Command::Pause(resume_after) => lifecycle::pause(db, notifier, &task, resume_after, now).await,
        Command::Resume => lifecycle::resume(db, notifier, &task, now).await,
        Command::Steer(note) => lifecycle::steer(db, notifier, &task, &note, now).await,
        Command::ApprovePlan(queries) => lifecycle::approve_plan(db, notifier, &task, queries, now).await,
        Command::Answer(text) => lifecycle::answer_clarification(db, notifier, &task, text, now).await,
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
async fn with_current(app: &App, id: Uuid, error: LifecycleError) -> AppError {
    let current: Option<job::Model> = tasks::find(&app.db, id).await.ok().flatten();
    match (AppError::from(error), current) {
        (AppError::Conflict { message, .. }, Some(task)) => AppError::Conflict {
            message,
            current_stage: Some(task.stage),
            row_version: Some(task.row_version),
            task_id: None,
        },
        (other, _) => other,
    }
}

/// A task as one read shows it to its owner: the row, how far it got, what it spent, what
/// it waits for, and its answer trace once completed and visible.
#[derive(Debug, Clone)]
pub struct TaskOverview {
    /// The task row.
    pub task: job::Model,
    /// The rounds whose evidence is written.
    pub rounds_done: usize,
    /// What the task has spent, in US dollars.
    pub cost_usd: f64,
    /// The wait for a person, while the task is paused for one.
    pub awaiting: Option<entity::research_task_wait::Model>,
    /// The answer trace of a completed task, if the caller may still see it.
    pub trace: Option<entity::answer_trace::Model>,
    /// The thread the task is a turn of, if any.
    pub thread_id: Option<Uuid>,
}

/// The sub-queries of a proposed plan, as a wait records it.
pub use crate::lifecycle::plan_queries;

/// The task `id` as [`TaskOverview`] shows it; NOT_FOUND when `caller` may not see it.
pub async fn overview(app: &App, caller: &Principal, id: Uuid) -> Result<TaskOverview, AppError> {
    use entity::research_task_partial_result as partial;
    let db = &app.db;
    let task = visible_task(db, caller, id).await?.ok_or(AppError::NotFound)?;
    let evidence_prefix = entity::BundleKey::EVIDENCE_PREFIX;
    let rounds_done = crate::store::journal::by_key_prefix::<partial::Entity, _>(db, task.id, evidence_prefix)
        .await?
        .into_iter()
        .filter(|row| entity::BundleKey::is_evidence(&row.idempotency_key))
        .count();
    let cost_usd = crate::research::cost::nanos_to_usd(crate::research::cost::spent_nanos(&task.cost));
    let awaiting = lifecycle::awaiting(db, &task).await?;
    let mut trace = None;
    if task.stage == entity::Stage::Completed
        && let Some(found) =
            crate::store::answer_traces::find_for_task(db, &task.tenant_id, &task.subject_id, task.id).await?
        && super::access::trace_is_visible(db, caller, &found).await?
    {
        trace = Some(found);
    }
    let thread_id = crate::store::threads::turn_of(db, task.id).await?.map(|turn| turn.research_thread_id);
    Ok(TaskOverview { task, rounds_done, cost_usd, awaiting, trace, thread_id })
}

/// The task `id`, if `caller` may see it (another subject's, or one whose grant died,
/// answers NOT_FOUND as a random id does).
pub async fn find(app: &App, caller: &Principal, id: Uuid) -> Result<job::Model, AppError> {
    visible_task(&app.db, caller, id).await?.ok_or(AppError::NotFound)
}

/// What `task` (one the caller may see) waits for from a person, if anything.
pub async fn awaiting(app: &App, task: &job::Model) -> Result<Option<entity::research_task_wait::Model>, AppError> {
    Ok(lifecycle::awaiting(&app.db, task).await?)
}

/// The task `id` as it is now and its progress events after sequence `after` (at most
/// `limit`), if `caller` may see it.
pub async fn progress_after(
    app: &App,
    caller: &Principal,
    id: Uuid,
    after: i32,
    limit: u64,
) -> Result<(job::Model, Vec<entity::research_task_progress_event::Model>), AppError> {
    use entity::research_task_progress_event as progress;
    let task = find(app, caller, id).await?;
    let events = crate::store::journal::after::<progress::Entity, _>(&app.db, id, after, limit).await?;
    Ok((task, events))
}

// What a task the caller was shown holds. The task passed `visible_task` (or a list that
// checks the same), so these read by its id.

/// The task's progress events after sequence `after`, at most `size`.
pub async fn progress_events(
    app: &App,
    task: &job::Model,
    after: i32,
    size: u64,
) -> Result<Vec<entity::research_task_progress_event::Model>, AppError> {
    use entity::research_task_progress_event as progress;
    Ok(crate::store::journal::after::<progress::Entity, _>(&app.db, task.id, after, size).await?)
}

/// The task's partial results after sequence `after`, at most `size`.
pub async fn partial_results(
    app: &App,
    task: &job::Model,
    after: i32,
    size: u64,
) -> Result<Vec<entity::research_task_partial_result::Model>, AppError> {
    use entity::research_task_partial_result as partial;
    Ok(crate::store::journal::after::<partial::Entity, _>(&app.db, task.id, after, size).await?)
}

/// The task's steering notes, oldest first.
pub async fn notes(app: &App, task: &job::Model) -> Result<Vec<entity::research_task_note::Model>, AppError> {
    Ok(crate::store::notes::of_task(&app.db, task.id).await?)
}

/// The task's waits for a person, open and ended.
pub async fn waits(app: &App, task: &job::Model) -> Result<Vec<entity::research_task_wait::Model>, AppError> {
    Ok(crate::store::waits::of_task(&app.db, task.id).await?)
}

/// The task's answer trace, owned by the task's own subject.
pub async fn answer_trace(app: &App, task: &job::Model) -> Result<Option<entity::answer_trace::Model>, AppError> {
    Ok(crate::store::answer_traces::find_for_task(&app.db, &task.tenant_id, &task.subject_id, task.id).await?)
}

/// The citation checks of an answer trace the caller was shown (none from before checks).
pub async fn citation_checks(app: &App, trace: &entity::answer_trace::Model) -> Result<Option<Value>, AppError> {
    Ok(crate::store::answer_traces::checks_for(&app.db, &[trace.id]).await?.remove(&trace.id).map(|row| row.checks))
}

/// The citations of an answer trace the caller was shown: those recorded with it, or for
/// an answer from before, its citation marks without verdicts or quotes.
pub async fn citations(
    app: &App,
    trace: &entity::answer_trace::Model,
) -> Result<Vec<crate::research::citations::CitationRecord>, AppError> {
    let row = crate::store::answer_traces::checks_for(&app.db, &[trace.id]).await?.remove(&trace.id);
    Ok(crate::research::citations::of_trace(&trace.answer, row.and_then(|row| row.citations).as_ref()))
}
