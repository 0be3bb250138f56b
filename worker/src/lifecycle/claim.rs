//! Claiming due jobs: leasing them to a worker with a fresh token, counting the attempt,
//! failing jobs that used all their attempts, and resuming paused jobs whose
//! `resume_after` passed.
use entity::{ProgressEventType, Stage, research_task_job as job};
use std::collections::{HashMap, HashSet, VecDeque};

use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DatabaseTransaction, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, LockBehavior, LockType},
};
use sea_orm::{DbErr, Iterable};
use serde_json::json;
use uuid::Uuid;

pub use super::fair::{Caps, Fairness, Pair};
use super::journal::Appended;
use super::lease::{Claimed, Lease, fail_row};
use super::row::{commit_many, event_signal, signal, touch};
use super::{LifecycleError, append_progress_event, delivery};
use super::{claim_many, fair};
use crate::db::{begin_write, is_postgres};
use crate::notify::{Notifier, SIGNALS_PER_NOTIFY, TaskSignal};

/// Leases up to `batch` due jobs for `worker_id` with no caps and no memory of earlier
/// claims ([`claim_fairly`] with a fresh [`Fairness`]): what tests and one-off callers use.
pub async fn claim_due(
    db: &DatabaseConnection,
    notifier: &Notifier,
    worker_id: &str,
    lease_ms: i64,
    batch: u64,
    now: i64,
) -> Result<Vec<Claimed>, LifecycleError> {
    let claim = Claim { worker_id, lease_ms, batch, caps: Caps::default() };
    claim_fairly(db, notifier, &claim, &mut Fairness::default(), now).await
}

/// What one claim step may take.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The worker the leases go to.
    pub worker_id: &'a str,
    /// How long they last.
    pub lease_ms: i64,
    /// The most jobs to lease.
    pub batch: u64,
    /// The running-task caps.
    pub caps: Caps,
}

/// Leases up to `claim.batch` due jobs: queued, or running with no live lease, with
/// `retry_at` passed; or paused with `resume_after` passed (resumed first). A job that used
/// all its attempts fails instead and is not returned.
///
/// Fair across tenants, and within a tenant across spaces: each lease goes to the (tenant,
/// space) with due work whose tenant runs the fewest tasks now, then the one this worker
/// served longest ago, then the space that runs the fewest, then the space served longest
/// ago; within one space, the oldest due job. A tenant or space at its cap is skipped (its
/// jobs stay queued). The work is one query for the pairs with unfinished work, one for
/// what runs, and an indexed probe per pair tried: never a scan of the backlog.
///
/// Claims commit in chunks of up to [`SIGNALS_PER_NOTIFY`]: one transaction, one commit
/// and one NOTIFY (listing the chunk's signals) for many leases, so a worker with
/// thousands of free slots fills them at the database's statement rate, not at one commit
/// per lease. SQLite's write lock is held for one chunk at a time. Under caps each claim
/// commits alone: the cap check takes its tenant's lock, and a transaction holding two
/// tenants' locks could deadlock with another worker taking them in the other order.
#[tracing::instrument(name = "claim", level = "debug", skip_all, fields(worker_id = %claim.worker_id, batch = claim.batch))]
pub async fn claim_fairly(
    db: &DatabaseConnection,
    notifier: &Notifier,
    claim: &Claim<'_>,
    fairness: &mut Fairness,
    now: i64,
) -> Result<Vec<Claimed>, LifecycleError> {
    let mut claimed = Vec::new();
    if claim.batch == 0 {
        return Ok(claimed);
    }
    let mut pairs = fair::active_pairs(db).await?;
    if pairs.is_empty() {
        return Ok(claimed);
    }
    let mut running = fair::running(db, now).await?;
    fairness.forget_all_but(&pairs);
    let per_commit = if claim.caps.is_unlimited() { SIGNALS_PER_NOTIFY } else { 1 };
    // Without caps on PostgreSQL, due rows are locked a few at a time per pair and the
    // plain claims of a chunk leased by one statement (`claim_many`).
    let batched = claim.caps.is_unlimited() && is_postgres(db.get_database_backend());
    let mut chunk = Chunk::begin(db, batched).await?;
    while (claimed.len() + chunk.len()) < claim.batch as usize && !pairs.is_empty() {
        pairs.sort_by_cached_key(|pair| fairness.order(pair, &running));
        // The first pair in line with a due job gets the lease; pairs without one (or at
        // their cap) are out for the rest of this step.
        let mut leased = None;
        while let Some(pair) = pairs.first().cloned() {
            if running.over(&pair, claim.caps) {
                metrics::counter!("claims_deferred_by_cap_total").increment(1);
                pairs.remove(0);
                continue;
            }
            if !claim.caps.is_unlimited() && fair::over_cap_now(&chunk.txn, &pair, claim.caps, now).await? {
                metrics::counter!("claims_deferred_by_cap_total").increment(1);
                // The chunk is empty under caps; rolling it back releases the tenant's lock.
                claimed.extend(chunk.commit(notifier, claim, now).await?);
                chunk = Chunk::begin(db, batched).await?;
                pairs.remove(0);
                continue;
            }
            // Rows locked ahead for one pair: its share of what this step and chunk may
            // still take, so the pairs behind it in line are not starved of rows.
            let room = (claim.batch as usize - claimed.len() - chunk.len()).min(per_commit - chunk.len());
            let ahead = room.div_ceil(pairs.len()).max(1);
            match chunk.next_due(&pair, ahead, now).await? {
                Some(due) if chunk.ahead.is_some() && claim_many::is_plain(&due) => {
                    chunk.plain.push(due);
                    leased = Some((pair, true));
                    break;
                }
                Some(due) => {
                    let (outcome, signal) = claim_one(&chunk.txn, due, claim.worker_id, claim.lease_ms, now).await?;
                    chunk.signals.push(signal);
                    let leases = outcome.is_some();
                    chunk.leased.extend(outcome);
                    leased = Some((pair, leases));
                    break;
                }
                None => {
                    pairs.remove(0);
                }
            }
        }
        let Some((pair, leases)) = leased else { break };
        // A job that failed for good instead of being leased still took its turn.
        fairness.served(&pair);
        if leases {
            running.add(&pair);
        }
        if chunk.len() >= per_commit {
            claimed.extend(chunk.commit(notifier, claim, now).await?);
            chunk = Chunk::begin(db, batched).await?;
        }
    }
    claimed.extend(chunk.commit(notifier, claim, now).await?);
    Ok(claimed)
}

/// Claims written in one transaction, not yet committed.
struct Chunk {
    txn: DatabaseTransaction,
    /// The signals of the claims written one by one.
    signals: Vec<TaskSignal>,
    /// The claims written one by one.
    leased: Vec<Claimed>,
    /// Plain claims chosen, to be leased together when the chunk commits.
    plain: Vec<job::Model>,
    /// PostgreSQL without caps: due rows this transaction locked ahead, per pair.
    ahead: Option<Ahead>,
}

/// Due rows locked ahead (valid only in the transaction that locked them).
#[derive(Default)]
struct Ahead {
    rows: HashMap<Pair, VecDeque<job::Model>>,
    /// Pairs whose every due row is already among `rows`.
    drained: HashSet<Pair>,
}

impl Chunk {
    /// Begins the next chunk (`batched`: locking rows ahead and leasing them together).
    async fn begin(db: &DatabaseConnection, batched: bool) -> Result<Self, LifecycleError> {
        Ok(Self {
            txn: begin_write(db).await?,
            signals: Vec::new(),
            leased: Vec::new(),
            plain: Vec::new(),
            ahead: batched.then(Ahead::default),
        })
    }

    /// The claims chosen so far.
    fn len(&self) -> usize {
        self.signals.len() + self.plain.len()
    }

    /// The pair's oldest due job not yet taken in this chunk, locked; up to `ahead` rows
    /// are locked at once when batching.
    async fn next_due(&mut self, pair: &Pair, ahead: usize, now: i64) -> Result<Option<job::Model>, LifecycleError> {
        let Some(locked) = &mut self.ahead else {
            return Ok(next_due(&self.txn, pair, now, 1, &[]).await?.pop());
        };
        if let Some(row) = locked.rows.get_mut(pair).and_then(VecDeque::pop_front) {
            return Ok(Some(row));
        }
        if locked.drained.contains(pair) {
            return Ok(None);
        }
        // Rows this transaction locked are not skipped by its own `SKIP LOCKED`, and the
        // ones taken are written only at commit: leave them out by id.
        let taken: Vec<Uuid> = self.plain.iter().map(|job| job.id).collect();
        let mut rows: VecDeque<job::Model> = next_due(&self.txn, pair, now, ahead as u64, &taken).await?.into();
        if rows.len() < ahead {
            locked.drained.insert(pair.clone());
        }
        let first = rows.pop_front();
        locked.rows.insert(pair.clone(), rows);
        Ok(first)
    }

    /// Leases the plain claims, commits the chunk's claims (or rolls back an empty one)
    /// and returns its leases; rows locked ahead and not taken are released.
    async fn commit(
        mut self,
        notifier: &Notifier,
        claim: &Claim<'_>,
        now: i64,
    ) -> Result<Vec<Claimed>, LifecycleError> {
        let (leased, signals) =
            claim_many::lease_all(&self.txn, &self.plain, claim.worker_id, claim.lease_ms, now).await?;
        self.leased.extend(leased);
        self.signals.extend(signals);
        if self.signals.is_empty() {
            self.txn.rollback().await?;
        } else {
            commit_many(self.txn, notifier, self.signals).await?;
        }
        Ok(self.leased)
    }
}

/// The `limit` oldest due jobs of one tenant's space but `taken`, locked; other workers
/// skip them on PostgreSQL instead of waiting.
async fn next_due(
    txn: &DatabaseTransaction,
    pair: &Pair,
    now: i64,
    limit: u64,
    taken: &[Uuid],
) -> Result<Vec<job::Model>, DbErr> {
    let lease_free = Condition::any().add(job::Column::LeaseToken.is_null()).add(job::Column::LeaseExpiresAt.lte(now));
    let retry_passed = Condition::any().add(job::Column::RetryAt.is_null()).add(job::Column::RetryAt.lte(now));
    let claimable = Stage::iter().filter(|stage| stage.is_claimable());
    let runnable = Condition::all().add(job::Column::Stage.is_in(claimable)).add(lease_free).add(retry_passed);
    let waking = Condition::all().add(job::Column::Stage.eq(Stage::Paused)).add(job::Column::ResumeAfter.lte(now));
    let mut query = job::Entity::find()
        .filter(job::Column::TenantId.eq(pair.tenant_id.as_str()))
        .filter(job::Column::KnowledgeSpaceId.eq(pair.knowledge_space_id))
        // The partial index's own predicate, so both planners read it.
        .filter(Expr::cust(format!("\"stage\" IN ({})", migration::UNFINISHED)))
        .filter(Condition::any().add(runnable).add(waking))
        .order_by_asc(job::Column::UpdatedAt)
        .order_by_asc(job::Column::Id)
        .limit(limit);
    if !taken.is_empty() {
        query = query.filter(job::Column::Id.is_not_in(taken.iter().copied()));
    }
    if is_postgres(txn.get_database_backend()) {
        query = query.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
    query.all(txn).await
}

/// Resumes (if paused), then leases or fails one due job; returns it when leased.
async fn claim_one(
    txn: &DatabaseTransaction,
    mut due: job::Model,
    worker_id: &str,
    lease_ms: i64,
    now: i64,
) -> Result<(Option<Claimed>, TaskSignal), LifecycleError> {
    // The last event this claim appends (webhooks are queued if any of them did).
    let mut last: Option<Appended> = None;
    if due.stage == Stage::Paused {
        let (resumed, appended) = auto_resume(txn, &due, now).await?;
        due = resumed;
        last = Some(appended);
    }
    if due.execution_attempts >= due.max_execution_attempts {
        let message =
            due.error.clone().unwrap_or_else(|| format!("gave up after {} execution attempts", due.execution_attempts));
        let failed = fail_row(txn, &due, &message, &json!({}), now).await?;
        metrics::counter!("research_tasks_ended_total", "stage" => "failed").increment(1);
        return Ok((None, event_signal(due.id, failed.after(last), None, false)));
    }

    record_claim(&due, now);
    let token = Uuid::new_v4();
    let mut row = due.clone().into_active_model();
    touch(&due, &mut row, now);
    // The first claim starts the pipeline: the stage after `queued`.
    let started = (due.stage == Stage::Queued).then(|| due.stage.next_in_pipeline()).flatten();
    if let Some(first) = started {
        row.stage = Set(first);
    }
    row.worker_id = Set(Some(worker_id.to_owned()));
    row.lease_token = Set(Some(token));
    row.lease_expires_at = Set(Some(now + lease_ms));
    row.heartbeat_at = Set(Some(now));
    row.retry_at = Set(None);
    row.execution_attempts = Set(due.execution_attempts + 1);
    let leased = row.update(txn).await?;
    if let Some(first) = started {
        let payload = started_payload(worker_id, leased.execution_attempts);
        let started =
            append_progress_event(txn, &leased, ProgressEventType::Started, first, "started", payload, now).await?;
        last = Some(started.after(last));
    }
    delivery::mark_leased(txn, leased.id, now).await?;
    let lease = Lease { job_id: leased.id, token, worker_id: worker_id.to_owned() };
    let signal = match last {
        Some(appended) => event_signal(due.id, appended, None, false),
        None => signal(due.id, None, None, false),
    };
    Ok((Some(Claimed { job: leased, lease, grant_checked: false }), signal))
}

/// What a claim of `due` tells the metrics (every claim, one by one or together).
pub(super) fn record_claim(due: &job::Model, now: i64) {
    if due.stage == Stage::Queued {
        // Created → first claim: how long tasks wait for a worker.
        metrics::histogram!("research_queue_wait_seconds").record((now - due.created_at).max(0) as f64 / 1e3);
    } else if due.lease_token.is_some() {
        // A running task whose lease lapsed: its worker died or stalled, and this claim
        // rescues it.
        metrics::counter!("research_lease_rescues_total").increment(1);
    }
}

/// The `started` event's payload: who claimed the task, at which attempt.
pub(super) fn started_payload(worker_id: &str, attempt: i32) -> serde_json::Value {
    json!({ "worker_id": worker_id, "attempt": attempt })
}

/// A paused job whose `resume_after` passed goes back to the stage it left, with a new
/// delivery and a `resumed` event, as an API resume would.
async fn auto_resume(
    txn: &DatabaseTransaction,
    paused: &job::Model,
    now: i64,
) -> Result<(job::Model, Appended), LifecycleError> {
    let target = paused
        .stage
        .apply(entity::LifecycleCommand::Resume, paused.paused_from_stage)
        .map_err(|refused| LifecycleError::NotAllowed { command: "resume", current: refused.current })?;
    let mut row = paused.clone().into_active_model();
    touch(paused, &mut row, now);
    row.stage = Set(target);
    row.paused_from_stage = Set(None);
    row.paused_at = Set(None);
    row.resume_after = Set(None);
    row.retry_at = Set(None);
    let resumed = row.update(txn).await?;
    delivery::enqueue(txn, &resumed, now).await?;
    let key = format!("resumed:{}", resumed.row_version);
    let payload = json!({ "from_stage": Stage::Paused, "automatic": true });
    let appended = append_progress_event(txn, &resumed, ProgressEventType::Resumed, target, &key, payload, now).await?;
    Ok((resumed, appended))
}
