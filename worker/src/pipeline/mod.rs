//! Runs one claimed job from its current stage to the end. It checks the grant before
//! the run's first stage, runs the engine's stage (`stages.rs`) under a cancellation
//! token while the keeper renews the lease, and commits a checkpoint, which checks the
//! grant again in its own fenced statement: every stage boundary re-checks the grant.
//! Stage outputs that later stages need are handed on in memory within a run and read
//! back from what the checkpoints committed when a run resumes mid-way, so a re-run after
//! a crash resumes at the last committed stage with no duplicate and no gap.
mod committer;
mod drafts;
mod human;
mod keeper;
mod passages;
mod quotes;
mod records;
mod rounds;
mod stages;
mod thread;

pub use committer::BoundaryCommitter;
pub use keeper::LeaseKeeper;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use entity::{Clock, research_task_job as job};
use sea_orm::DatabaseConnection;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use uuid::Uuid;

use crate::config::WorkerSettings;
use crate::grant;
use crate::lifecycle::{self, Boundary, BoundaryStep, Claimed, Committed, FailOutcome, Failure, Lease, LifecycleError};
use crate::notify::Notifier;
use crate::research::cost;
use crate::research::cost::CostDelta;
use crate::research::engine::{ResearchEngine, limits_of};
use stages::StageEnd;

/// A database error met while running a stage (reading what earlier stages committed): a
/// hiccup another attempt may get past.
impl From<sea_orm::DbErr> for crate::research::engine::EngineError {
    fn from(error: sea_orm::DbErr) -> Self {
        Self::Transient(Box::new(error))
    }
}

/// Everything a run needs; cheap to share between the jobs a worker runs at once.
#[derive(Clone)]
pub struct Pipeline {
    /// The database.
    pub db: DatabaseConnection,
    /// In-process wake-ups and live events.
    pub notifier: Notifier,
    /// What each stage does.
    pub engine: Arc<dyn ResearchEngine>,
    /// How the engine's searches rank passages (full text, or hybrid).
    pub retriever: crate::knowledge::retrieve::Retriever,
    /// Leases, heartbeats, retries.
    pub settings: Arc<WorkerSettings>,
    /// The time every lifecycle write is stamped with.
    pub clock: Clock,
    /// Which tenants and spaces this worker served last, for fair claiming.
    pub fairness: Arc<tokio::sync::Mutex<crate::lifecycle::Fairness>>,
    /// Renews the leases of the running stages, all in one statement per beat.
    pub keeper: LeaseKeeper,
    /// Commits the stage boundaries of the running tasks, several in one transaction.
    pub committer: BoundaryCommitter,
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
    /// The task waits for a person (plan approval, a clarification) and holds no lease.
    AwaitingInput,
}

/// What became of a stage run under the heartbeat.
enum Guarded<T> {
    Done(T),
    LeaseLost,
    Aborted,
}

impl Pipeline {
    /// Runs the job until it completes, fails, waits for a retry, loses its lease or is
    /// stopped, inside one `task run` span. Errors are database failures while recording
    /// the outcome; the lease then lapses and another claim retries the stage.
    pub async fn run(&self, claimed: Claimed, stop: &Stop) -> Result<RunOutcome, LifecycleError> {
        let span = tracing::info_span!(
            "task run",
            task.id = %claimed.job.id,
            stage = claimed.job.stage.as_str(),
            attempt = claimed.job.execution_attempts,
            worker_id = %claimed.lease.worker_id,
        );
        crate::telemetry::context::join_stored(&self.db, &span, claimed.job.id).await;
        let run = async {
            let outcome = self.run_stages(claimed, stop).await;
            match &outcome {
                Ok(RunOutcome::LeaseLost) => {
                    metrics::counter!("research_fenced_out_total").increment(1);
                    tracing::info!("lease lost; stopped without writing");
                }
                Ok(outcome) => tracing::debug!(outcome = ?outcome, "research run ended"),
                Err(error) => tracing::error!(error = %error, "research run failed to record its outcome"),
            }
            outcome
        };
        run.instrument(span).await
    }

    async fn run_stages(&self, claimed: Claimed, stop: &Stop) -> Result<RunOutcome, LifecycleError> {
        let lease = claimed.lease;
        let mut task = claimed.job;
        let mut carried = stages::Carried::default();
        // The first stage's boundary is the claim, which checked the grant in its own
        // transaction; every later one is a checkpoint, which does too.
        if let Some(denial) = claimed.grant {
            return self.denied(&lease, denial, CostDelta::none()).await;
        }
        let human = human::Human::load(&self.db, &task, self.clock.now()).await?;
        let thread = thread::load(&self.db, &task, self.settings.thread_context_chars, self.clock.now()).await?;
        loop {
            tracing::Span::current().record("stage", task.stage.as_str());
            if !task.stage.is_running() {
                // A claim always leaves a running stage; anything else means someone else
                // moved the task, so there is nothing for this lease to do.
                return Ok(RunOutcome::LeaseLost);
            }
            if stop.drain.is_cancelled() {
                return self.release(&lease).await;
            }
            if let Some(deadline) = limits_of(&task).deadline_ms.map(|deadline| deadline.get())
                && self.clock.now()
                    - task.created_at
                    - human.waited_ms
                    - thread.as_ref().map_or(0, |view| view.waited_ms)
                    > deadline
            {
                let message = format!("limit exceeded: limits.deadline_ms {deadline} passed");
                return self.fail(&lease, message, false, CostDelta::none()).await;
            }
            let cancel = CancellationToken::new();
            let drafts = stages::Drafts {
                notifier: &self.notifier,
                lease: &lease,
                every: Duration::from_millis(self.settings.answer_draft_ms.max(1)),
            };
            let library = passages::Library { db: &self.db, retriever: &self.retriever };
            let work = stages::run(
                &library,
                self.engine.as_ref(),
                &task,
                cancel.clone(),
                drafts,
                std::mem::take(&mut carried),
                stages::Said { human: &human, thread: thread.as_ref() },
            );
            let started = std::time::Instant::now();
            let guarded = self.guarded(&lease, &stop.abort, &cancel, work).await;
            metrics::histogram!("research_stage_duration_seconds", "stage" => task.stage.as_str())
                .record(started.elapsed().as_secs_f64());
            let ended = match guarded {
                Guarded::Done(Ok(ended)) => ended,
                Guarded::Done(Err(stages::StageFailure { error, cost_delta })) => {
                    let retryable = error.is_retryable();
                    let message = format!("{:#}", anyhow::Error::from(error));
                    return self.fail(&lease, message, retryable, cost_delta).await;
                }
                Guarded::LeaseLost => return Ok(RunOutcome::LeaseLost),
                Guarded::Aborted => return self.release(&lease).await,
            };
            if let Some(message) = over_budget(&task, ended.cost_delta()) {
                let spent = ended.cost_delta().clone();
                return self.fail(&lease, message, false, spent).await;
            }
            let spent = ended.cost_delta().clone();
            let step = match ended {
                StageEnd::Next(step, carry) => {
                    carried = carry;
                    BoundaryStep::Checkpoint(step, self.settings.lease_ms)
                }
                StageEnd::Done(done) => BoundaryStep::Complete(done),
                StageEnd::Await(request, spent) => return self.await_input(&lease, request, spent).await,
            };
            let now = self.clock.now();
            let boundary = Boundary { lease: lease.clone(), from: task, step, now, span: tracing::Span::current() };
            match self.committer.commit(boundary).await {
                Ok(Committed::Checkpoint(next)) => task = *next,
                Ok(Committed::Complete(trace)) => {
                    tracing::info!(answer_trace.id = %trace.id, "research task completed");
                    return Ok(RunOutcome::Completed(trace.id));
                }
                Err(LifecycleError::LeaseLost) => return Ok(RunOutcome::LeaseLost),
                Err(LifecycleError::GrantDenied(denial)) => return self.denied(&lease, denial, spent).await,
                Err(error) => return Err(error),
            }
        }
    }

    /// Runs `work` while the keeper renews its lease; stops it when the lease is lost or
    /// the worker aborts. A signal about this task (a cancel or pause committed here or,
    /// through the listener, in another process) makes the keeper look at once, so a
    /// cancelled stage stops within a round trip rather than at the next beat.
    async fn guarded<T>(
        &self,
        lease: &Lease,
        abort: &CancellationToken,
        cancel: &CancellationToken,
        work: impl Future<Output = T>,
    ) -> Guarded<T> {
        let holding = self.keeper.hold(lease);
        // Abort first: past the grace period the stage must stop even if it is about to
        // finish. Then a lost lease, which makes the stage's result worthless. Work last.
        let outcome = tokio::select! {
            biased;
            () = abort.cancelled() => Guarded::Aborted,
            () = holding.lost.cancelled() => Guarded::LeaseLost,
            out = work => return Guarded::Done(out),
        };
        cancel.cancel();
        outcome
    }

    async fn fail(
        &self,
        lease: &Lease,
        message: String,
        retryable: bool,
        cost_delta: CostDelta,
    ) -> Result<RunOutcome, LifecycleError> {
        let failure = Failure { message: message.clone(), retryable, cost_delta };
        let policy = self.settings.retry_policy();
        match lifecycle::fail_attempt(&self.db, &self.notifier, lease, failure, policy, self.clock.now()).await {
            Ok(FailOutcome::Retrying { retry_at }) => {
                tracing::warn!(error = %message, retry_at, "research attempt failed; will retry");
                Ok(RunOutcome::Retrying(retry_at))
            }
            Ok(FailOutcome::Failed) => {
                tracing::warn!(error = %message, "research task failed");
                Ok(RunOutcome::Failed(message))
            }
            Err(LifecycleError::LeaseLost) => Ok(RunOutcome::LeaseLost),
            Err(error) => Err(error),
        }
    }

    /// Ends the task in `failed` because its grant died; what the stage spent still counts.
    async fn denied(
        &self,
        lease: &Lease,
        denial: grant::GrantDenial,
        spent: CostDelta,
    ) -> Result<RunOutcome, LifecycleError> {
        metrics::counter!("research_grant_denials_total", "reason" => denial.label()).increment(1);
        self.fail(lease, denial.message().to_owned(), false, spent).await
    }

    /// Pauses the task until a person answers `request`; the lease goes with it.
    async fn await_input(
        &self,
        lease: &Lease,
        request: lifecycle::InputRequest,
        spent: CostDelta,
    ) -> Result<RunOutcome, LifecycleError> {
        match lifecycle::await_input(&self.db, &self.notifier, lease, request, &spent, self.clock.now()).await {
            Ok(_) => Ok(RunOutcome::AwaitingInput),
            Err(LifecycleError::LeaseLost) => Ok(RunOutcome::LeaseLost),
            Err(error) => Err(error),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<RunOutcome, LifecycleError> {
        match lifecycle::release(&self.db, &self.notifier, lease, self.clock.now()).await {
            Ok(()) => Ok(RunOutcome::Released),
            Err(LifecycleError::LeaseLost) => Ok(RunOutcome::LeaseLost),
            Err(error) => Err(error),
        }
    }
}

/// The budget message when the task's spend plus `delta` passes `budget_usd`, compared in
/// whole nanodollars.
fn over_budget(task: &job::Model, delta: &CostDelta) -> Option<String> {
    let budget = cost::usd_to_nanos(task.budget_usd?);
    let spent = cost::spent_nanos(&delta.added_to(&task.cost));
    (spent > budget).then(|| {
        format!(
            "budget exceeded: spent ${:.9} of the ${:.9} budget",
            cost::nanos_to_usd(spent),
            cost::nanos_to_usd(budget)
        )
    })
}
