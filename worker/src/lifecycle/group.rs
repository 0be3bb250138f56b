//! Group commit: the stage boundaries of several tasks in one transaction, so that a
//! worker running many tasks pays one commit (one WAL flush on PostgreSQL) per group
//! rather than one per boundary. Every boundary keeps its own fence: each lands only while
//! its row carries its own lease's token (and its grant holds), so a lost lease loses that
//! boundary and no other.
//!
//! On PostgreSQL the whole group is written by one statement (`batch.rs`), where each
//! boundary's writes hang off its own fenced row; boundaries the stage rule refuses are
//! left out of it and committed alone, which refuses them after their fence. On SQLite
//! (one writer, statements in process) each boundary is written by the same statements
//! as alone ([`checkpoint_in`], [`complete_in`]), and one that fails in a way that may
//! have left writes behind (a statement's error, a stage moved under its lease) rolls the
//! group back.
//!
//! Either way a group whose writing fails is rolled back and every boundary of it is then
//! committed alone, so one bad boundary costs the others a retry, never their data. When
//! the database cannot be reached, or the commit itself fails (it may have landed), every
//! boundary of the group fails as it would have alone, and its lease lapses.
use entity::{answer_trace, research_task_job as job};
use sea_orm::{DatabaseConnection, DatabaseTransaction, DbErr};
use tracing::Instrument as _;

use super::batch;
use super::lease::{Written, checkpoint_in, complete_in, may_checkpoint, may_complete};
use super::{Checkpoint, Completion, Lease, LifecycleError, checkpoint, complete};
use crate::db::{begin_write, is_postgres};
use crate::notify::{Notifier, TaskSignal, notify_many_in_transaction};

/// One task's stage boundary, waiting to be committed.
#[derive(Debug, Clone)]
pub struct Boundary {
    /// The lease that fences it.
    pub lease: Lease,
    /// The job as this lease last committed it.
    pub from: job::Model,
    /// What it commits.
    pub step: BoundaryStep,
    /// The time it is stamped with.
    pub now: i64,
    /// The span its writes are recorded under (the task run's), wherever they run.
    pub span: tracing::Span,
}

impl Boundary {
    /// The span its writes get in a group: the one they would have had alone, under its
    /// own task's run.
    fn own_span(&self) -> tracing::Span {
        match self.step {
            BoundaryStep::Complete(_) => {
                tracing::debug_span!(parent: &self.span, "complete", task.id = %self.lease.job_id)
            }
            BoundaryStep::Checkpoint(..) => {
                tracing::debug_span!(parent: &self.span, "checkpoint", task.id = %self.lease.job_id)
            }
        }
    }

    /// Whether the stage rule allows the move this boundary makes from its stage.
    fn is_allowed(&self) -> bool {
        match &self.step {
            BoundaryStep::Checkpoint(step, _) => may_checkpoint(self.from.stage, step.next_stage),
            BoundaryStep::Complete(_) => may_complete(self.from.stage),
        }
    }
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

/// Commits `boundaries` (of different tasks) in one transaction, or each alone when one
/// of them failed in it; returns each one's result in the order given. Rows are written in job-id order,
/// so two groups locking the same rows (a stale worker's and its successor's) cannot
/// deadlock each other.
pub async fn commit_boundaries(
    db: &DatabaseConnection,
    notifier: &Notifier,
    boundaries: Vec<Boundary>,
) -> Vec<Result<Committed, LifecycleError>> {
    let postgres = is_postgres(db.get_database_backend());
    if boundaries.len() <= 1 && !postgres {
        return commit_each_alone(db, notifier, boundaries).await;
    }
    let together = if postgres {
        commit_in_one_statement(db, notifier, &boundaries).await
    } else {
        commit_together(db, notifier, &boundaries).await.map(|results| results.into_iter().map(Some).collect())
    };
    match together {
        // Boundaries the stage rule refused were left out: each is committed alone, which
        // refuses it after its fence (a stale worker hears that it lost its lease).
        Ok(results) => {
            let mut all = Vec::with_capacity(results.len());
            for (boundary, result) in boundaries.into_iter().zip(results) {
                all.push(match result {
                    Some(result) => result,
                    None => commit_alone(db, notifier, boundary).await,
                });
            }
            all
        }
        Err(GroupFailed::Boundary(error)) if !lost_connection(&error) => {
            tracing::debug!(error = %error, boundaries = boundaries.len(), "group commit rolled back; committing each alone");
            commit_each_alone(db, notifier, boundaries).await
        }
        // The database is out of reach (committing each alone would wait for a connection
        // once per boundary), or the commit itself failed, when it may still have landed:
        // every boundary fails as one committed alone would, and its lease lapses.
        Err(failed) => {
            tracing::warn!(error = %failed, boundaries = boundaries.len(), "group commit failed");
            let message = failed.to_string();
            boundaries.iter().map(|_| Err(LifecycleError::Database(DbErr::Custom(message.clone())))).collect()
        }
    }
}

/// Whether `error` says the database could not be reached, not that a statement failed.
fn lost_connection(error: &LifecycleError) -> bool {
    matches!(error, LifecycleError::Database(error) if crate::db::is_unavailable(error))
}

async fn commit_each_alone(
    db: &DatabaseConnection,
    notifier: &Notifier,
    boundaries: Vec<Boundary>,
) -> Vec<Result<Committed, LifecycleError>> {
    let mut results = Vec::with_capacity(boundaries.len());
    for boundary in boundaries {
        results.push(commit_alone(db, notifier, boundary).await);
    }
    results
}

/// The boundary in its own transaction, exactly as the pipeline commits it when alone.
async fn commit_alone(
    db: &DatabaseConnection,
    notifier: &Notifier,
    boundary: Boundary,
) -> Result<Committed, LifecycleError> {
    let Boundary { lease, from, step, now, span } = boundary;
    let committed = async {
        match step {
            BoundaryStep::Checkpoint(step, lease_ms) => checkpoint(db, notifier, &lease, &from, lease_ms, step, now)
                .await
                .map(|job| Committed::Checkpoint(Box::new(job))),
            BoundaryStep::Complete(done) => {
                complete(db, notifier, &lease, &from, done, now).await.map(|trace| Committed::Complete(Box::new(trace)))
            }
        }
    };
    committed.instrument(span).await
}

/// Why a group could not commit together: the transaction was rolled back.
#[derive(Debug, thiserror::Error)]
enum GroupFailed {
    #[error("a boundary failed: {0}")]
    Boundary(LifecycleError),
    #[error("the group's commit failed: {0}")]
    Database(#[from] DbErr),
}

async fn commit_together(
    db: &DatabaseConnection,
    notifier: &Notifier,
    boundaries: &[Boundary],
) -> Result<Vec<Result<Committed, LifecycleError>>, GroupFailed> {
    let mut order: Vec<usize> = (0..boundaries.len()).collect();
    order.sort_by_key(|&index| boundaries[index].lease.job_id);
    let txn = begin_write(db).await?;
    let mut results: Vec<Option<Result<Committed, LifecycleError>>> = boundaries.iter().map(|_| None).collect();
    let mut written = Vec::with_capacity(boundaries.len());
    for index in order {
        match write(&txn, boundaries[index].clone()).await {
            Ok((committed, wrote)) => {
                results[index] = Some(Ok(committed));
                written.push(wrote);
            }
            // Neither writes anything: the fenced update matched no row.
            Err(lost @ (LifecycleError::LeaseLost | LifecycleError::GrantDenied(_))) => {
                results[index] = Some(Err(lost))
            }
            Err(error) => return Err(GroupFailed::Boundary(error)),
        }
    }
    // The NOTIFYs the appends did not queue themselves (SQLite, a replayed key).
    let signals = written.iter().map(|wrote| (wrote.signal(), wrote.appended.announced)).collect();
    finish(txn, notifier, signals, &results).await?;
    Ok(results.into_iter().flatten().collect())
}

/// The group on PostgreSQL: the boundaries the stage rule allows are written by one
/// statement (`batch.rs`), then one NOTIFY per 32 of their signals and the commit. Those it
/// refuses are left out (`None`), for the caller to commit alone.
async fn commit_in_one_statement(
    db: &DatabaseConnection,
    notifier: &Notifier,
    boundaries: &[Boundary],
) -> Result<Vec<Option<Result<Committed, LifecycleError>>>, GroupFailed> {
    let allowed: Vec<usize> = (0..boundaries.len()).filter(|&index| boundaries[index].is_allowed()).collect();
    let mut results: Vec<Option<Result<Committed, LifecycleError>>> = boundaries.iter().map(|_| None).collect();
    if allowed.is_empty() {
        return Ok(results);
    }
    // Each boundary's span, under its own task's run, lasts while its group is written.
    let _spans: Vec<tracing::Span> = allowed.iter().map(|&index| boundaries[index].own_span()).collect();
    let written: Vec<&Boundary> = allowed.iter().map(|&index| &boundaries[index]).collect();
    let txn = begin_write(db).await?;
    let outcomes =
        batch::write(&txn, &written).await.map_err(|error| GroupFailed::Boundary(LifecycleError::Database(error)))?;
    let mut signals = Vec::with_capacity(outcomes.len());
    for (&index, outcome) in allowed.iter().zip(outcomes) {
        results[index] = Some(outcome.map(|landed| {
            signals.push((landed.signal, false));
            landed.committed
        }));
    }
    finish(txn, notifier, signals, &results).await?;
    Ok(results)
}

/// The one way a group ends: a NOTIFY for each signal its writes did not already announce
/// (`true` beside it), the commit, then this process hears every signal, and the
/// completions among `results` are counted.
async fn finish(
    txn: DatabaseTransaction,
    notifier: &Notifier,
    signals: Vec<(TaskSignal, bool)>,
    results: &[Option<Result<Committed, LifecycleError>>],
) -> Result<(), GroupFailed> {
    let unannounced: Vec<TaskSignal> =
        signals.iter().filter(|(_, announced)| !announced).map(|(signal, _)| signal.clone()).collect();
    notify_many_in_transaction(&txn, &unannounced).await?;
    txn.commit().await?;
    for (signal, _) in signals {
        notifier.publish(signal);
    }
    let completed = results.iter().filter(|result| matches!(result, Some(Ok(Committed::Complete(_))))).count();
    metrics::counter!("research_tasks_ended_total", "stage" => "completed").increment(completed as u64);
    Ok(())
}

async fn write(txn: &DatabaseTransaction, boundary: Boundary) -> Result<(Committed, Written), LifecycleError> {
    let span = boundary.own_span();
    let Boundary { lease, from, step, now, .. } = boundary;
    match step {
        BoundaryStep::Checkpoint(step, lease_ms) => {
            let (job, written) = checkpoint_in(txn, &lease, &from, lease_ms, step, now).instrument(span).await?;
            Ok((Committed::Checkpoint(Box::new(job)), written))
        }
        BoundaryStep::Complete(done) => {
            let (trace, written) = complete_in(txn, &lease, &from, done, now).instrument(span).await?;
            Ok((Committed::Complete(Box::new(trace)), written))
        }
    }
}
