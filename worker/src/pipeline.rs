//! Runs one claimed job from its current stage to the end. At every stage boundary it
//! re-checks the grant, runs the engine's stage under a cancellation token while
//! heartbeating, and commits a checkpoint. Stage outputs that later stages need are read
//! back from what the checkpoints committed (the plan from the `stage:retrieving` event,
//! retrievals and evidence from partial results), so a re-run after a crash resumes at the
//! last committed stage with no duplicate and no gap.
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use entity::{
    Stage, now_millis, research_task_job as job, research_task_partial_result as partial,
    research_task_progress_event as progress,
};
use sea_orm::{ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::WorkerSettings;
use crate::engine::{Answer, EngineError, Limits, Passage, Plan, ResearchEngine, Retrieval, StageContext};
use crate::grant;
use crate::lifecycle::{self, Checkpoint, Claimed, Completion, FailOutcome, Failure, Lease, LifecycleError};
use crate::notify::Notifier;

/// Everything a run needs; cheap to share between the jobs a worker runs at once.
#[derive(Clone)]
pub struct Pipeline {
    /// The database.
    pub db: DatabaseConnection,
    /// In-process wake-ups and live events.
    pub notifier: Notifier,
    /// What each stage does.
    pub engine: Arc<dyn ResearchEngine>,
    /// Leases, heartbeats, retries.
    pub settings: Arc<WorkerSettings>,
}

/// How a worker is asked to stop.
#[derive(Clone, Default)]
pub struct Stop {
    /// Stop at the next stage boundary (after its checkpoint) and release the lease.
    pub drain: CancellationToken,
    /// Stop now, dropping the running stage, and release the lease.
    pub abort: CancellationToken,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// The task completed with this answer trace.
    Completed(Uuid),
    /// The attempt failed and the task waits for `retry_at`.
    Retrying(i64),
    /// The task ended in `failed` with this error.
    Failed(String),
    /// Another party took the lease (expiry and re-claim, cancel, pause): nothing was written.
    LeaseLost,
    /// The worker is stopping and gave the lease back.
    Released,
}

/// What a finished stage hands to the lifecycle.
enum StageEnd {
    Next(Checkpoint),
    Done(Completion),
}

/// What became of a stage run under the heartbeat.
enum Guarded<T> {
    Done(T),
    LeaseLost,
    Aborted,
}

impl Pipeline {
    /// Runs the job until it completes, fails, waits for a retry, loses its lease or is
    /// stopped. Errors are database failures while recording the outcome; the lease then
    /// lapses and another claim retries the stage.
    pub async fn run(&self, claimed: Claimed, stop: &Stop) -> Result<RunOutcome, LifecycleError> {
        let lease = claimed.lease;
        let mut task = claimed.job;
        loop {
            if !task.stage.is_running() {
                // A claim always leaves a running stage; anything else means someone else
                // moved the task, so there is nothing for this lease to do.
                return Ok(RunOutcome::LeaseLost);
            }
            if stop.drain.is_cancelled() {
                return self.release(&lease).await;
            }
            match grant::check(&self.db, task.permission_snapshot_id).await {
                Ok(Ok(())) => {}
                Ok(Err(denial)) => return self.fail(&lease, denial.message().to_owned(), false, Value::Null).await,
                Err(error) => {
                    return self.fail(&lease, format!("checking the grant failed: {error}"), true, Value::Null).await;
                }
            }
            if let Some(deadline) = Limits::of(&task).deadline_ms
                && now_millis() - task.created_at > deadline
            {
                let message = format!("limit exceeded: limits.deadline_ms {deadline} passed");
                return self.fail(&lease, message, false, Value::Null).await;
            }
            let cancel = CancellationToken::new();
            let ended = match self.guarded(&lease, &stop.abort, &cancel, self.run_stage(&task, cancel.clone())).await {
                Guarded::Done(Ok(ended)) => ended,
                Guarded::Done(Err(error)) => {
                    let retryable = error.is_retryable();
                    return self.fail(&lease, error.to_string(), retryable, Value::Null).await;
                }
                Guarded::LeaseLost => return Ok(RunOutcome::LeaseLost),
                Guarded::Aborted => return self.release(&lease).await,
            };
            let spent = match &ended {
                StageEnd::Next(step) => &step.cost_delta,
                StageEnd::Done(done) => &done.cost_delta,
            };
            if let Some(message) = over_budget(&task, spent) {
                let spent = spent.clone();
                return self.fail(&lease, message, false, spent).await;
            }
            match ended {
                StageEnd::Next(step) => {
                    match lifecycle::checkpoint(&self.db, &self.notifier, &lease, self.settings.lease_ms, step).await {
                        Ok(next) => task = next,
                        Err(LifecycleError::LeaseLost) => return Ok(RunOutcome::LeaseLost),
                        Err(error) => return Err(error),
                    }
                }
                StageEnd::Done(done) => {
                    return match lifecycle::complete(&self.db, &self.notifier, &lease, done).await {
                        Ok(trace) => {
                            tracing::info!(task.id = %lease.job_id, answer_trace.id = %trace.id, "research task completed");
                            Ok(RunOutcome::Completed(trace.id))
                        }
                        Err(LifecycleError::LeaseLost) => Ok(RunOutcome::LeaseLost),
                        Err(error) => Err(error),
                    };
                }
            }
        }
    }

    /// Runs `work` while heartbeating; stops it when the lease is lost or the worker aborts.
    async fn guarded<T>(
        &self,
        lease: &Lease,
        abort: &CancellationToken,
        cancel: &CancellationToken,
        work: impl Future<Output = T>,
    ) -> Guarded<T> {
        let beat = async {
            let mut ticker = tokio::time::interval(Duration::from_millis(self.settings.heartbeat_ms.max(1)));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The first tick is immediate; the claim or checkpoint just renewed the lease.
            ticker.tick().await;
            loop {
                ticker.tick().await;
                match lifecycle::heartbeat(&self.db, lease, self.settings.lease_ms).await {
                    Ok(()) => {}
                    Err(LifecycleError::LeaseLost) => return,
                    // A missed beat is not fatal: the lease has slack, and the checkpoint
                    // is fenced anyway.
                    Err(error) => tracing::warn!(task.id = %lease.job_id, error = %error, "heartbeat failed"),
                }
            }
        };
        // Abort first: past the grace period the stage must stop even if it is about to
        // finish. Then a lost lease, which makes the stage's result worthless. Work last.
        let outcome = tokio::select! {
            biased;
            () = abort.cancelled() => Guarded::Aborted,
            () = beat => Guarded::LeaseLost,
            out = work => return Guarded::Done(out),
        };
        cancel.cancel();
        outcome
    }

    /// Runs the engine for the task's stage and shapes what the boundary commits.
    async fn run_stage(&self, task: &job::Model, cancel: CancellationToken) -> Result<StageEnd, EngineError> {
        let ctx = StageContext { db: &self.db, job: task, cancel };
        let engine = &self.engine;
        match task.stage {
            Stage::Planning => {
                let plan = engine.plan(&ctx).await?;
                Ok(StageEnd::Next(Checkpoint {
                    next_stage: Stage::Retrieving,
                    partial_results: Vec::new(),
                    cost_delta: plan.cost.to_delta("planning"),
                    payload: json!({ "plan": plan.output }),
                }))
            }
            Stage::Retrieving => {
                let plan = match load_plan(&self.db, task.id).await? {
                    Some(plan) => plan,
                    // Only reachable for rows written before plans were recorded; the built-in
                    // planner is deterministic, so recomputing gives the same plan.
                    None => engine.plan(&ctx).await?.output,
                };
                let found = engine.retrieve(&ctx, &plan).await?;
                let partial_results = found
                    .output
                    .iter()
                    .enumerate()
                    .map(|(index, retrieval)| {
                        let bundle = json!({ "kind": "retrieval", "sub_query": retrieval.sub_query, "passages": retrieval.passages });
                        (format!("retrieval:{}", index + 1), bundle)
                    })
                    .collect();
                Ok(StageEnd::Next(Checkpoint {
                    next_stage: Stage::Analyzing,
                    partial_results,
                    cost_delta: found.cost.to_delta("retrieving"),
                    payload: json!({ "sub_queries": plan.sub_queries.len() }),
                }))
            }
            Stage::Analyzing => {
                let found = load_retrievals(&self.db, task.id).await?;
                let evidence = engine.analyze(&ctx, &found).await?;
                let bundle = json!({ "kind": "evidence", "evidence": evidence.output });
                Ok(StageEnd::Next(Checkpoint {
                    next_stage: Stage::Generating,
                    partial_results: vec![("evidence".to_owned(), bundle)],
                    cost_delta: evidence.cost.to_delta("analyzing"),
                    payload: json!({ "evidence": evidence.output.len() }),
                }))
            }
            Stage::Generating => {
                let evidence = load_evidence(&self.db, task.id).await?;
                let answer = engine.generate(&ctx, &evidence).await?;
                Ok(StageEnd::Done(Completion {
                    evidence: cited(&answer.output),
                    answer: answer.output.text,
                    cost_delta: answer.cost.to_delta("generating"),
                }))
            }
            other => Err(EngineError::Transient(format!("no engine stage for {}", other.as_str()))),
        }
    }

    async fn fail(
        &self,
        lease: &Lease,
        message: String,
        retryable: bool,
        cost_delta: Value,
    ) -> Result<RunOutcome, LifecycleError> {
        let failure = Failure { message: message.clone(), retryable, cost_delta };
        match lifecycle::fail_attempt(&self.db, &self.notifier, lease, failure, self.settings.retry_policy()).await {
            Ok(FailOutcome::Retrying { retry_at }) => {
                tracing::warn!(task.id = %lease.job_id, error = %message, retry_at, "research attempt failed; will retry");
                Ok(RunOutcome::Retrying(retry_at))
            }
            Ok(FailOutcome::Failed) => {
                tracing::warn!(task.id = %lease.job_id, error = %message, "research task failed");
                Ok(RunOutcome::Failed(message))
            }
            Err(LifecycleError::LeaseLost) => Ok(RunOutcome::LeaseLost),
            Err(error) => Err(error),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<RunOutcome, LifecycleError> {
        match lifecycle::release(&self.db, &self.notifier, lease).await {
            Ok(()) => Ok(RunOutcome::Released),
            Err(LifecycleError::LeaseLost) => Ok(RunOutcome::LeaseLost),
            Err(error) => Err(error),
        }
    }
}

/// The budget message when the task's spend plus `delta` passes `budget_usd`.
fn over_budget(task: &job::Model, delta: &Value) -> Option<String> {
    let budget = task.budget_usd?;
    let total = lifecycle::merge_cost(&task.cost, delta);
    let spent = total.get("usd").and_then(Value::as_f64).unwrap_or(0.0);
    (spent > budget).then(|| format!("budget exceeded: spent ${spent:.6} of the ${budget:.6} budget"))
}

/// The evidence as the answer trace stores it: each passage with its citation number.
fn cited(answer: &Answer) -> Value {
    let rows: Vec<Value> = answer
        .evidence
        .iter()
        .enumerate()
        .map(|(index, passage)| {
            json!({
                "citation": index + 1,
                "document_id": passage.document_id,
                "title": passage.title,
                "snippet": passage.snippet,
                "score": passage.score,
            })
        })
        .collect();
    Value::Array(rows)
}

/// The plan planning committed with the move to retrieving.
async fn load_plan(db: &DatabaseConnection, task_id: Uuid) -> Result<Option<Plan>, DbErr> {
    let event = progress::Entity::find()
        .filter(progress::Column::ResearchTaskJobId.eq(task_id))
        .filter(progress::Column::IdempotencyKey.eq("stage:retrieving"))
        .one(db)
        .await?;
    Ok(event.and_then(|event| serde_json::from_value(event.payload.get("plan")?.clone()).ok()))
}

/// The retrievals committed with the move to analyzing, in sub-query order.
async fn load_retrievals(db: &DatabaseConnection, task_id: Uuid) -> Result<Vec<Retrieval>, DbErr> {
    let rows = partial::Entity::find()
        .filter(partial::Column::ResearchTaskJobId.eq(task_id))
        .filter(partial::Column::IdempotencyKey.starts_with("retrieval:"))
        .order_by_asc(partial::Column::Sequence)
        .all(db)
        .await?;
    rows.into_iter()
        .map(|row| serde_json::from_value(row.evidence_bundle).map_err(|error| DbErr::Json(error.to_string())))
        .collect()
}

/// The evidence committed with the move to generating.
async fn load_evidence(db: &DatabaseConnection, task_id: Uuid) -> Result<Vec<Passage>, DbErr> {
    let row = partial::Entity::find()
        .filter(partial::Column::ResearchTaskJobId.eq(task_id))
        .filter(partial::Column::IdempotencyKey.eq("evidence"))
        .one(db)
        .await?;
    match row.and_then(|row| row.evidence_bundle.get("evidence").cloned()) {
        Some(evidence) => serde_json::from_value(evidence).map_err(|error| DbErr::Json(error.to_string())),
        None => Ok(Vec::new()),
    }
}
