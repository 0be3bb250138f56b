//! Stage boundaries: how a lease holder moves its task on. The lifecycle decides each
//! boundary (the stage rule, the new cost, the event's payload, the answer trace) and the
//! store writes any number of them in one transaction (`store::boundaries`): a single
//! boundary is a batch of one. Each keeps its own fence (its row must still carry its
//! lease's token, be in the stage its worker ran, and its grant must hold), so a lost
//! lease loses that boundary and no other.
//!
//! A batch whose writing fails is rolled back and each of its boundaries is then written
//! alone, so one bad boundary costs the others a retry, never their data. When the
//! database cannot be reached, or the commit itself fails (it may have landed), every
//! boundary of the batch fails as it would have alone, and its lease lapses.
use entity::{ProgressEventType, Stage, answer_trace, research_task_job as job};
use sea_orm::{DatabaseConnection, DatabaseTransaction, DbErr};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Lease, LifecycleError};
use crate::notify::{Notifier, TaskSignal};
use crate::research::cost::CostDelta;
use crate::store::boundaries::{BoundaryOutcome, BoundaryWrite, EventWrite, Landed, PartialWrite, TraceWrite};
use crate::store::tasks::Fence;
use crate::store::{self, begin_write};

/// What a checkpoint commits.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The stage the task moves to (never `completed`: that is a [`Completion`]).
    pub next_stage: Stage,
    /// Evidence bundles keyed by idempotency key; a key written before is skipped.
    pub partial_results: Vec<(String, Value)>,
    /// What the finished stage spent.
    pub cost_delta: CostDelta,
    /// Details for the `stage_changed` event (what the finished stage produced).
    pub payload: Value,
    /// The research round the next stage runs in; from round 2 on it keys the event
    /// (`stage:retrieving:r2`), so a later round is never taken for a replay of an earlier.
    pub round: u32,
}

/// The end of a task that produced an answer.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The extractive answer with numbered citations.
    pub answer: String,
    /// The cited evidence, a JSON array in citation order.
    pub evidence: Value,
    /// The verdicts of the answer's citation checks, a JSON array of `{sentence,
    /// citation, verdict}` (empty when the engine checked nothing).
    pub citation_checks: Value,
    /// The final answer's citations with their quotes, a JSON array of `{n, sentence,
    /// verdict, quote}` (empty when the engine recorded none).
    pub citations: Value,
    /// What generation spent.
    pub cost_delta: CostDelta,
    /// What generation reports about itself (model, citations removed…), recorded in the
    /// `completed` event's payload as `generation`; null for nothing.
    pub payload: Value,
}

/// One task's stage boundary, waiting to be committed.
#[derive(Debug, Clone)]
pub struct Boundary {
    /// The lease that fences it.
    pub lease: Lease,
    /// The job as this lease last committed it (its stage and cost are still the row's:
    /// only the lease holder writes them, and every other writer replaces the token first).
    pub from: job::Model,
    /// What it commits.
    pub step: BoundaryStep,
    /// The time it is stamped with.
    pub now: i64,
    /// The span its writes are recorded under (the task run's), wherever they run.
    pub span: tracing::Span,
}

/// What a boundary commits.
#[derive(Debug, Clone)]
pub enum BoundaryStep {
    /// A move to the next stage, renewing the lease for this long (ms).
    Checkpoint(Checkpoint, i64),
    /// The answer.
    Complete(Completion),
}

/// What a committed boundary left.
#[derive(Debug, Clone)]
pub enum Committed {
    /// The job after its checkpoint.
    Checkpoint(Box<job::Model>),
    /// The answer trace of the completed task.
    Complete(Box<answer_trace::Model>),
}

impl Boundary {
    /// The lifecycle command it is, for refusals.
    fn command(&self) -> &'static str {
        match self.step {
            BoundaryStep::Checkpoint(..) => "checkpoint",
            BoundaryStep::Complete(_) => "complete",
        }
    }

    /// Whether the stage rule allows the move this boundary makes from its stage.
    fn is_allowed(&self) -> bool {
        match &self.step {
            BoundaryStep::Checkpoint(step, _) => {
                step.next_stage != Stage::Completed && self.from.stage.may_become(step.next_stage, None)
            }
            BoundaryStep::Complete(_) => self.from.stage.may_become(Stage::Completed, None),
        }
    }

    /// The span its writes get: the one they would have had alone, under its task's run.
    fn own_span(&self) -> tracing::Span {
        tracing::debug_span!(parent: &self.span, "boundary", task.id = %self.lease.job_id, command = self.command())
    }

    /// The write the store makes of it.
    fn write(&self) -> BoundaryWrite {
        let from = &self.from;
        let (stage, cost_delta, lease_expires_at) = match &self.step {
            BoundaryStep::Checkpoint(step, lease_ms) => {
                (step.next_stage, &step.cost_delta, Some(self.now.saturating_add(*lease_ms)))
            }
            BoundaryStep::Complete(done) => (Stage::Completed, &done.cost_delta, None),
        };
        let cost = cost_delta.added_to(&from.cost);
        let (payload, partials, trace) = match &self.step {
            BoundaryStep::Checkpoint(step, _) => {
                let mut payload = step.payload.clone();
                if let Value::Object(fields) = &mut payload {
                    fields.insert("from_stage".into(), json!(from.stage));
                }
                let partials = step
                    .partial_results
                    .iter()
                    .map(|(key, bundle)| PartialWrite { id: Uuid::now_v7(), key: key.clone(), bundle: bundle.clone() })
                    .collect();
                (payload, partials, None)
            }
            BoundaryStep::Complete(done) => {
                let trace = TraceWrite {
                    id: Uuid::now_v7(),
                    answer: done.answer.clone(),
                    evidence: done.evidence.clone(),
                    checks: done.citation_checks.clone(),
                    citations: done.citations.clone(),
                };
                let mut payload = json!({ "from_stage": from.stage, "answer_trace_id": trace.id, "cost": cost });
                if !done.payload.is_null() {
                    payload["generation"] = done.payload.clone();
                }
                (payload, Vec::new(), Some(trace))
            }
        };
        BoundaryWrite {
            lease: self.lease.pair(),
            from_stage: from.stage,
            stage,
            cost,
            now: self.now,
            lease_expires_at,
            event: EventWrite {
                id: Uuid::now_v7(),
                event_type: ProgressEventType::StageChanged,
                key: match &self.step {
                    BoundaryStep::Checkpoint(step, _) => entity::StageKey { stage, round: step.round }.encode(),
                    _ => entity::StageKey { stage, round: 1 }.encode(),
                },
                payload,
            },
            partials,
            trace,
        }
    }
}

/// Commits one boundary ([`commit_boundaries`] of one).
pub async fn commit_boundary(
    db: &DatabaseConnection,
    notifier: &Notifier,
    boundary: Boundary,
) -> Result<Committed, LifecycleError> {
    let mut results = commit_boundaries(db, notifier, vec![boundary]).await;
    results.pop().unwrap_or_else(|| Err(LifecycleError::Database(DbErr::Custom("no boundary was committed".into()))))
}

/// Commits `boundaries` (of different tasks) in one transaction, or each alone when
/// writing them together failed; returns each one's result in the order given.
pub async fn commit_boundaries(
    db: &DatabaseConnection,
    notifier: &Notifier,
    boundaries: Vec<Boundary>,
) -> Vec<Result<Committed, LifecycleError>> {
    match commit_together(db, notifier, &boundaries).await {
        Ok(results) => results,
        // The batch rolled back: each boundary alone, so the others still land.
        Err(Failed::Statement(error)) if boundaries.len() > 1 && !store::is_unavailable(&error) => {
            tracing::warn!(error = %error, boundaries = boundaries.len(), "a batch of boundaries failed; writing each alone");
            let mut results = Vec::with_capacity(boundaries.len());
            for boundary in boundaries {
                let alone = commit_together(db, notifier, std::slice::from_ref(&boundary)).await;
                results.push(match alone {
                    Ok(mut result) => result.pop().unwrap_or_else(|| Err(no_result())),
                    Err(failed) => Err(LifecycleError::Database(failed.into_error())),
                });
            }
            results
        }
        // Out of reach, or the commit itself failed (it may have landed): every boundary
        // fails as one written alone would, and its lease lapses.
        Err(failed) => {
            let message = failed.into_error().to_string();
            tracing::warn!(error = %message, boundaries = boundaries.len(), "committing boundaries failed");
            boundaries.iter().map(|_| Err(LifecycleError::Database(DbErr::Custom(message.clone())))).collect()
        }
    }
}

fn no_result() -> LifecycleError {
    LifecycleError::Database(DbErr::Custom("no boundary was committed".into()))
}

/// Why a transaction of boundaries did not commit.
enum Failed {
    /// A statement failed; the transaction was rolled back.
    Statement(DbErr),
    /// The commit failed (it may have landed).
    Commit(DbErr),
}

impl Failed {
    fn into_error(self) -> DbErr {
        match self {
            Self::Statement(error) | Self::Commit(error) => error,
        }
    }
}

/// The boundaries in one transaction: those the stage rule allows written by the store;
/// those it refuses checked against their fence (a stale worker hears it lost its lease)
/// and refused; webhooks queued for new events; the signals announced and published.
async fn commit_together(
    db: &DatabaseConnection,
    notifier: &Notifier,
    boundaries: &[Boundary],
) -> Result<Vec<Result<Committed, LifecycleError>>, Failed> {
    let spans: Vec<tracing::Span> = boundaries.iter().map(Boundary::own_span).collect();
    let txn = begin_write(db).await.map_err(Failed::Statement)?;
    let written = write_all(&txn, boundaries).await;
    let (results, signals) = match written {
        Ok(written) => written,
        Err(error) => {
            let _ = txn.rollback().await;
            return Err(Failed::Statement(error));
        }
    };
    let completed = results.iter().filter(|result| matches!(result, Ok(Committed::Complete(_)))).count();
    if let Err(error) = store::signals::announce(&txn, &signals).await {
        return Err(Failed::Statement(error));
    }
    txn.commit().await.map_err(Failed::Commit)?;
    for signal in signals {
        notifier.publish(signal);
    }
    metrics::counter!("research_tasks_ended_total", "stage" => "completed").increment(completed as u64);
    drop(spans);
    Ok(results)
}

/// Writes the boundaries in `txn`; returns each one's result and the commit's signals.
async fn write_all(
    txn: &DatabaseTransaction,
    boundaries: &[Boundary],
) -> Result<(Vec<Result<Committed, LifecycleError>>, Vec<TaskSignal>), DbErr> {
    let mut results: Vec<Option<Result<Committed, LifecycleError>>> = boundaries.iter().map(|_| None).collect();
    let mut allowed = Vec::with_capacity(boundaries.len());
    for (index, boundary) in boundaries.iter().enumerate() {
        if boundary.is_allowed() {
            allowed.push(index);
            continue;
        }
        let fence = store::tasks::fence(txn, boundary.lease.pair(), boundary.from.stage, boundary.now).await?;
        let refused = match fence {
            Some(fence) => refusal(boundary, fence),
            None => LifecycleError::NotAllowed { command: boundary.command(), current: boundary.from.stage },
        };
        results[index] = Some(Err(refused));
    }
    let writes: Vec<BoundaryWrite> = allowed.iter().map(|&index| boundaries[index].write()).collect();
    let outcomes = store::boundaries::write(txn, &writes).await?;
    let mut signals = Vec::with_capacity(writes.len());
    for ((index, write), outcome) in allowed.into_iter().zip(writes).zip(outcomes) {
        let boundary = &boundaries[index];
        results[index] = Some(match outcome {
            BoundaryOutcome::Fenced(fence) => Err(refusal(boundary, fence)),
            BoundaryOutcome::Landed(landed) => {
                let webhooks = queue_webhooks(txn, &write, &landed).await?;
                signals.push(TaskSignal::by_lease_holder(boundary.lease.job_id).with_webhooks(webhooks));
                Ok(committed(write, *landed))
            }
        });
    }
    Ok((results.into_iter().map(|result| result.unwrap_or_else(|| Err(no_result()))).collect(), signals))
}

/// Queues the webhook deliveries of a landed boundary's event, when it is new and the
/// task's creator has an endpoint; returns whether any were queued.
async fn queue_webhooks(txn: &DatabaseTransaction, write: &BoundaryWrite, landed: &Landed) -> Result<bool, DbErr> {
    if !(landed.event_new && landed.any_endpoint) {
        return Ok(false);
    }
    let event = &write.event;
    crate::webhooks::enqueue(
        txn,
        &landed.job,
        event.event_type,
        write.stage,
        landed.event_sequence,
        &event.payload,
        write.now,
    )
    .await
}

/// What a landed boundary left: the job, or the completed task's answer trace (the values
/// the store inserted).
fn committed(write: BoundaryWrite, landed: Landed) -> Committed {
    let job = landed.job;
    match write.trace {
        None => Committed::Checkpoint(Box::new(job)),
        Some(trace) => Committed::Complete(Box::new(answer_trace::Model {
            id: trace.id,
            tenant_id: job.tenant_id.clone(),
            knowledge_space_id: job.knowledge_space_id,
            research_task_id: Some(job.id),
            query: job.query.clone(),
            answer: trace.answer,
            evidence: trace.evidence,
            created_at: write.now,
            subject_id: Some(job.subject_id.clone()),
            permission_snapshot_id: Some(job.permission_snapshot_id),
            permission_snapshot_revision: Some(job.permission_snapshot_revision),
            access_channel: Some(job.access_channel),
        })),
    }
}

/// The error a fence makes of a boundary.
fn refusal(boundary: &Boundary, fence: Fence) -> LifecycleError {
    match fence {
        Fence::LeaseLost => LifecycleError::LeaseLost,
        Fence::StageMoved(current) => LifecycleError::NotAllowed { command: boundary.command(), current },
        Fence::GrantDenied(denial) => LifecycleError::GrantDenied(denial),
    }
}

/// Commits a checkpoint alone (tests and one-off callers; the pipeline goes through its
/// committer). Returns the job as committed.
pub async fn checkpoint(
    db: &DatabaseConnection,
    notifier: &Notifier,
    lease: &Lease,
    from: &job::Model,
    lease_ms: i64,
    step: Checkpoint,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    let boundary = Boundary {
        lease: lease.clone(),
        from: from.clone(),
        step: BoundaryStep::Checkpoint(step, lease_ms),
        now,
        span: tracing::Span::current(),
    };
    match commit_boundary(db, notifier, boundary).await? {
        Committed::Checkpoint(job) => Ok(*job),
        Committed::Complete(_) => Err(no_result()),
    }
}

/// Commits a completion alone; returns the answer trace.
pub async fn complete(
    db: &DatabaseConnection,
    notifier: &Notifier,
    lease: &Lease,
    from: &job::Model,
    completion: Completion,
    now: i64,
) -> Result<answer_trace::Model, LifecycleError> {
    let boundary = Boundary {
        lease: lease.clone(),
        from: from.clone(),
        step: BoundaryStep::Complete(completion),
        now,
        span: tracing::Span::current(),
    };
    match commit_boundary(db, notifier, boundary).await? {
        Committed::Complete(trace) => Ok(*trace),
        Committed::Checkpoint(_) => Err(no_result()),
    }
}
