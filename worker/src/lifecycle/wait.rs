//! Waiting for a person: a stage that needs input (a plan to approve, a clarifying
//! question) pauses its task with a wait row saying what for (`await_input`, the lease
//! holder's fenced write); the person's answer (`approve_plan`, `answer_clarification`),
//! a plain resume, a cancel or the wait's timeout ends it (`end_wait`) and the task goes
//! back to the stage it left (`resume_locked`). The job row keeps only what the seed gives
//! a pause: `paused`, `paused_from_stage`, and `resume_after` as the wait's end, so a
//! waiting task holds no lease and its timeout is an ordinary automatic resume.
use entity::research_task_wait::{self as wait, CLARIFICATION, PLAN_APPROVAL};

use super::records::{PausedForInput, Resumed, StoredPlan, WaitEnded, stored};
use entity::{OutboxStatus, ProgressEventType, Stage, TaskLimits, research_task_job as job};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde_json::Value;
use uuid::Uuid;

use super::LifecycleError;
use super::attempt::lock_leased;
use super::commit::{clear_lease, commit, touch};
use super::events::{self, Appended, Event};
use super::lease::Lease;
use super::task_ref::TaskRef;
use crate::notify::{Notifier, TaskSignal};
use crate::research::cost::CostDelta;
use crate::store::{self, begin_write};

/// What a stage asks a person.
#[derive(Debug, Clone, PartialEq)]
pub enum InputRequest {
    /// Approve (or edit) the plan before the first retrieval. `plan` is the plan as the
    /// engine wrote it (`{mode, sub_queries}`), kept whole so round 1 runs it.
    PlanApproval {
        /// The proposed plan.
        plan: Value,
        /// A follow-up's standalone query, which the plan was made from.
        standalone_query: Option<String>,
    },
    /// Answer one question before planning.
    Clarification {
        /// The question.
        question: String,
    },
}

impl InputRequest {
    fn reason(&self) -> &'static str {
        match self {
            Self::PlanApproval { .. } => PLAN_APPROVAL,
            Self::Clarification { .. } => CLARIFICATION,
        }
    }

    /// The stage the task goes back to when the wait ends.
    fn resumes_at(&self) -> Stage {
        match self {
            Self::PlanApproval { .. } => Stage::Retrieving,
            Self::Clarification { .. } => Stage::Planning,
        }
    }
}

/// The sub-queries of a stored plan (`{mode, sub_queries}`).
pub fn plan_queries(plan: &Value) -> Vec<String> {
    plan.get("sub_queries")
        .and_then(Value::as_array)
        .map(|queries| queries.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Pauses the leased task until a person answers `request` or `limits.input_timeout_ms`
/// passes, fenced by `lease`: the lease is cleared (a waiting task holds no worker slot),
/// the attempt given back (waiting is not a failure), the stage's spend added, the
/// outbox entries closed, the wait recorded and a `PAUSED` event appended with
/// `{reason, plan | question}`.
#[tracing::instrument(name = "await input", level = "debug", skip_all, fields(task.id = %lease.job_id))]
pub async fn await_input(
    db: &DatabaseConnection,
    notifier: &Notifier,
    lease: &Lease,
    request: InputRequest,
    cost_delta: &CostDelta,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    let txn = begin_write(db).await?;
    let current = lock_leased(&txn, lease).await?;
    let until = now.saturating_add(TaskLimits::from_stored(&current.limits).input_timeout());
    let mut row = current.clone();
    touch(&mut row, now);
    clear_lease(&mut row);
    row.stage = Stage::Paused;
    row.paused_from_stage = Some(request.resumes_at());
    row.paused_at = Some(now);
    row.resume_after = Some(until);
    row.retry_at = None;
    row.execution_attempts = (row.execution_attempts - 1).max(0);
    row.cost = cost_delta.added_to(&current.cost);
    let paused = store::tasks::save(&txn, row).await?;
    store::outbox::close(&txn, paused.id, OutboxStatus::Canceled, now).await?;
    let reason = request.reason();
    let mut said = PausedForInput {
        from_stage: current.stage,
        reason,
        resume_after: until,
        plan: None,
        question: None,
        standalone_query: None,
    };
    let mut wait = wait::Model {
        id: Uuid::now_v7(),
        research_task_job_id: paused.id,
        reason: reason.to_owned(),
        proposed_plan: None,
        question: None,
        since: now,
        until,
        resolved_at: None,
        resolution: None,
        approved_plan: None,
        answer: None,
    };
    match request {
        InputRequest::PlanApproval { plan, standalone_query } => {
            said.plan = Some(plan_queries(&plan));
            said.standalone_query = standalone_query;
            wait.proposed_plan = Some(plan);
        }
        InputRequest::Clarification { question } => {
            said.question = Some(question.clone());
            wait.question = Some(question);
        }
    }
    store::waits::insert(&txn, wait).await?;
    let payload = stored(&said);
    let event =
        Event { event_type: ProgressEventType::Paused, stage: Stage::Paused, key: format!("paused:{reason}"), payload };
    let appended = events::append(&txn, &paused, event, now).await?;
    let signal = TaskSignal::by_lease_holder(paused.id).with_webhooks(appended.webhooks);
    commit(txn, notifier, vec![signal]).await?;
    metrics::counter!("research_task_waits_total", "reason" => reason).increment(1);
    Ok(paused)
}

/// How a wait ends.
#[derive(Debug, Clone, Default)]
pub(super) struct Ending {
    /// `approved`, `answered`, `resumed`, `timed_out` or `canceled`.
    pub resolution: &'static str,
    /// The plan round 1 searches (plan approval only).
    pub approved_plan: Option<Value>,
    /// Whether the approved plan differs from the proposed one.
    pub edited: bool,
    /// The person's answer (clarification only).
    pub answer: Option<String>,
}

/// Ends `open` (the task's lock held) and returns what the `RESUMED` event says about it:
/// `{reason, edited, answered, timed_out}`, and the plan round 1 will search.
pub(super) async fn end_wait<C: ConnectionTrait>(
    txn: &C,
    open: wait::Model,
    ending: Ending,
    now: i64,
) -> Result<WaitEnded, LifecycleError> {
    let mut row = open;
    let answered = ending.answer.is_some();
    row.resolved_at = Some(now.max(row.since));
    row.resolution = Some(ending.resolution.to_owned());
    if row.reason == PLAN_APPROVAL {
        // Ended any other way than an approval, round 1 searches the plan as proposed.
        row.approved_plan = ending.approved_plan.or_else(|| row.proposed_plan.clone());
    }
    row.answer = ending.answer;
    let said = WaitEnded {
        reason: row.reason.clone(),
        edited: ending.edited,
        answered,
        timed_out: ending.resolution == "timed_out",
        plan: row.approved_plan.as_ref().map(plan_queries),
    };
    store::waits::save(txn, row).await?;
    metrics::counter!("research_task_waits_ended_total", "resolution" => ending.resolution).increment(1);
    Ok(said)
}

/// Puts the locked, paused task back in the stage it left, with a new outbox entry and a
/// `RESUMED` event saying whether it resumed by itself and how its wait ended.
pub(super) async fn resume_locked<C: ConnectionTrait>(
    txn: &C,
    paused: job::Model,
    automatic: bool,
    wait: Option<WaitEnded>,
    now: i64,
) -> Result<(job::Model, Appended), LifecycleError> {
    let target = paused
        .stage
        .apply(entity::LifecycleCommand::Resume, paused.paused_from_stage)
        .map_err(|refused| LifecycleError::NotAllowed { command: "resume", current: refused.current })?;
    let mut row = paused;
    touch(&mut row, now);
    row.stage = target;
    row.paused_from_stage = None;
    row.paused_at = None;
    row.resume_after = None;
    row.retry_at = None;
    let resumed = store::tasks::save(txn, row).await?;
    let revision = store::outbox::last_revision(txn, resumed.id).await? + 1;
    store::outbox::insert(txn, store::outbox::entry(&resumed, revision, now)).await?;
    let payload = stored(&Resumed { automatic, wait, from_stage: Stage::Paused });
    let event = Event {
        event_type: ProgressEventType::Resumed,
        stage: target,
        key: format!("resumed:{}", resumed.row_version),
        payload,
    };
    let appended = events::append(txn, &resumed, event, now).await?;
    Ok((resumed, appended))
}

/// Approves the plan of a task waiting for plan approval and resumes it: round 1 searches
/// `sub_queries` (already validated one by one), or the plan as proposed when `None`.
pub async fn approve_plan(
    db: &DatabaseConnection,
    notifier: &Notifier,
    task: &TaskRef,
    sub_queries: Option<Vec<String>>,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    answer(db, notifier, task, Input::Plan(sub_queries), now).await
}

/// Answers the clarifying question of a task waiting for one and resumes it; the answer
/// becomes part of what its plan and answer are written from.
pub async fn answer_clarification(
    db: &DatabaseConnection,
    notifier: &Notifier,
    task: &TaskRef,
    text: String,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    answer(db, notifier, task, Input::Clarification(text), now).await
}

/// A person's input to a wait.
enum Input {
    Plan(Option<Vec<String>>),
    Clarification(String),
}

impl Input {
    fn reason(&self) -> &'static str {
        match self {
            Self::Plan(_) => PLAN_APPROVAL,
            Self::Clarification(_) => CLARIFICATION,
        }
    }
}

#[tracing::instrument(name = "answer wait", level = "debug", skip_all, fields(task.id = %task.id, reason = input.reason()))]
async fn answer(
    db: &DatabaseConnection,
    notifier: &Notifier,
    task: &TaskRef,
    input: Input,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    let txn = begin_write(db).await?;
    let current = store::tasks::lock(&txn, task.id)
        .await?
        .filter(|row| row.tenant_id == task.tenant_id && row.subject_id == task.subject_id)
        .ok_or(LifecycleError::NotFound)?;
    // The input against the task's own limits first: BAD_USER_INPUT before CONFLICT.
    if let Input::Plan(Some(queries)) = &input
        && let Some(max) = TaskLimits::from_stored(&current.limits).max_sub_queries.map(|max| max.get())
        && queries.len() as i64 > max
    {
        return Err(LifecycleError::PlanTooLong { count: queries.len(), max });
    }
    if let Some(expected) = task.expected_row_version
        && expected != current.row_version
    {
        return Err(LifecycleError::StaleRowVersion { expected, actual: current.row_version });
    }
    let open = if current.stage == Stage::Paused { store::waits::open(&txn, current.id).await? } else { None };
    let wanted = input.reason();
    let open = match open {
        Some(open) if open.reason == wanted => open,
        other => {
            let awaiting = other.map(|open| if open.reason == PLAN_APPROVAL { PLAN_APPROVAL } else { CLARIFICATION });
            return Err(LifecycleError::NotAwaiting { wanted, awaiting, current: current.stage });
        }
    };
    let ending = match input {
        Input::Plan(given) => {
            let mut plan = StoredPlan::of(open.proposed_plan.clone());
            let edited = given.as_ref().is_some_and(|given| *given != plan.sub_queries);
            if let Some(given) = given {
                plan.sub_queries = given;
            }
            Ending { resolution: "approved", approved_plan: Some(plan.into_value()), edited, answer: None }
        }
        Input::Clarification(text) => Ending { resolution: "answered", answer: Some(text), ..Ending::default() },
    };
    let said = end_wait(&txn, open, ending, now).await?;
    let (resumed, appended) = resume_locked(&txn, current, false, Some(said), now).await?;
    commit(txn, notifier, vec![TaskSignal::work(resumed.id).with_webhooks(appended.webhooks)]).await?;
    let counted = if wanted == PLAN_APPROVAL { "plan_approved" } else { "clarified" };
    metrics::counter!("research_task_commands_total", "command" => counted).increment(1);
    Ok(resumed)
}

/// What the task waits for now: its open wait while it is paused.
pub async fn awaiting<C: ConnectionTrait>(conn: &C, task: &job::Model) -> Result<Option<wait::Model>, LifecycleError> {
    if task.stage != Stage::Paused {
        return Ok(None);
    }
    Ok(store::waits::open(conn, task.id).await?)
}
