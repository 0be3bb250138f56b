//! Claiming due tasks: which pair goes next (fair across tenants, and within a tenant
//! across spaces), whether a due task is resumed, failed or leased, and what its `started`
//! event says. The store finds the pairs and due rows and writes the leases
//! (`store::claims`).
use std::collections::{HashMap, HashSet, VecDeque};

use entity::{ProgressEventType, Stage, research_task_job as job};
use sea_orm::{DatabaseConnection, DatabaseTransaction};
use serde_json::json;
use uuid::Uuid;

use super::commit::commit;
use super::fair::{self, Caps, Fairness, Running};
use super::wait::{Ending, end_wait, resume_locked};
use super::{Claimed, Lease, LifecycleError};
use crate::notify::{Notifier, SIGNALS_PER_NOTIFY, TaskSignal};
use crate::research::cost::CostDelta;
use crate::store::boundaries::EventWrite;
use crate::store::claims::{LeaseWrite, Pair};
use crate::store::{self, begin_write};

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
/// Claims commit up to [`SIGNALS_PER_NOTIFY`] at a time, their leases written together
/// (one statement on PostgreSQL), so a worker with thousands of free slots fills them at
/// the database's statement rate, not at one commit per lease. Under caps each claim
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
    let mut pairs = store::claims::pairs(db).await?;
    if pairs.is_empty() {
        return Ok(claimed);
    }
    let mut running = Running::of(store::claims::running(db, now).await?);
    fairness.forget_all_but(&pairs);
    let per_commit = if claim.caps.is_unlimited() { SIGNALS_PER_NOTIFY } else { 1 };
    let mut pending = Pending::begin(db).await?;
    while claimed.len() + pending.len() < claim.batch as usize && !pairs.is_empty() {
        pairs.sort_by_cached_key(|pair| fairness.order(pair, &running));
        // The first pair in line with a due job gets the turn; pairs without one (or at
        // their cap) are out for the rest of this step.
        let mut served = None;
        while let Some(pair) = pairs.first().cloned() {
            if running.over(&pair, claim.caps) {
                metrics::counter!("claims_deferred_by_cap_total").increment(1);
                pairs.remove(0);
                continue;
            }
            if !claim.caps.is_unlimited() && fair::over_cap_now(&pending.txn, &pair, claim.caps, now).await? {
                metrics::counter!("claims_deferred_by_cap_total").increment(1);
                // Nothing is pending under caps; ending the transaction releases the lock.
                claimed.extend(pending.commit(notifier, claim, now).await?);
                pending = Pending::begin(db).await?;
                pairs.remove(0);
                continue;
            }
            // Rows locked ahead for one pair: its share of what this step may still take,
            // so the pairs behind it in line are not starved of rows.
            let room = (claim.batch as usize - claimed.len() - pending.len()).min(per_commit - pending.len());
            let ahead = room.div_ceil(pairs.len()).max(1);
            match pending.next_due(&pair, ahead, now).await? {
                Some(due) => {
                    let leases = pending.take(due, claim, now).await?;
                    served = Some((pair, leases));
                    break;
                }
                None => {
                    pairs.remove(0);
                }
            }
        }
        let Some((pair, leases)) = served else { break };
        // A job that failed for good instead of being leased still took its turn.
        fairness.served(&pair);
        if leases {
            running.add(&pair);
        }
        if pending.len() >= per_commit {
            claimed.extend(pending.commit(notifier, claim, now).await?);
            pending = Pending::begin(db).await?;
        }
    }
    claimed.extend(pending.commit(notifier, claim, now).await?);
    Ok(claimed)
}

/// Claims decided in one transaction, not yet committed.
struct Pending {
    txn: DatabaseTransaction,
    /// Due rows to lease, as decided (resumed first when they were paused).
    leases: Vec<(job::Model, LeaseWrite)>,
    /// Signals of tasks that changed without a lease (failed for good).
    signals: Vec<TaskSignal>,
    /// Due rows this transaction locked ahead, per pair.
    ahead: HashMap<Pair, VecDeque<job::Model>>,
    /// Pairs whose every due row is already among `ahead`.
    drained: HashSet<Pair>,
}

impl Pending {
    async fn begin(db: &DatabaseConnection) -> Result<Self, LifecycleError> {
        Ok(Self {
            txn: begin_write(db).await?,
            leases: Vec::new(),
            signals: Vec::new(),
            ahead: HashMap::new(),
            drained: HashSet::new(),
        })
    }

    /// The claims decided so far (leases and failures).
    fn len(&self) -> usize {
        self.leases.len() + self.signals.len()
    }

    /// The pair's oldest due job not yet taken in this transaction, locked; up to `ahead`
    /// rows are locked at once.
    async fn next_due(&mut self, pair: &Pair, ahead: usize, now: i64) -> Result<Option<job::Model>, LifecycleError> {
        if let Some(row) = self.ahead.get_mut(pair).and_then(VecDeque::pop_front) {
            return Ok(Some(row));
        }
        if self.drained.contains(pair) {
            return Ok(None);
        }
        // Rows this transaction locked are not skipped by its own `SKIP LOCKED`, and the
        // ones taken are written only at commit: leave them out by id.
        let taken: Vec<Uuid> = self.leases.iter().map(|(due, _)| due.id).collect();
        let mut rows: VecDeque<job::Model> =
            store::claims::due(&self.txn, pair, now, ahead as u64, &taken).await?.into();
        if rows.len() < ahead {
            self.drained.insert(pair.clone());
        }
        let first = rows.pop_front();
        self.ahead.insert(pair.clone(), rows);
        Ok(first)
    }

    /// Decides what becomes of `due`: resumed first when paused, then failed for good when
    /// it used its attempts, else leased at commit. Returns whether it will be leased.
    async fn take(&mut self, due: job::Model, claim: &Claim<'_>, now: i64) -> Result<bool, LifecycleError> {
        let mut due = due;
        let mut webhooks = false;
        if due.stage == Stage::Paused {
            let (resumed, queued) = auto_resume(&self.txn, due, now).await?;
            due = resumed;
            webhooks = queued;
        }
        if due.execution_attempts >= due.max_execution_attempts {
            let message = due
                .error
                .clone()
                .unwrap_or_else(|| format!("gave up after {} execution attempts", due.execution_attempts));
            let id = due.id;
            let failed = super::attempt::fail(&self.txn, due, &message, &CostDelta::none(), now).await?;
            metrics::counter!("research_tasks_ended_total", "stage" => "failed").increment(1);
            self.signals.push(TaskSignal::changed(id).with_webhooks(webhooks || failed.webhooks));
            return Ok(false);
        }
        // The first claim starts the pipeline: the stage after `queued`.
        let started = (due.stage == Stage::Queued).then(|| due.stage.next_in_pipeline()).flatten();
        let lease = LeaseWrite {
            job_id: due.id,
            token: Uuid::new_v4(),
            worker_id: claim.worker_id.to_owned(),
            stage: started.unwrap_or(due.stage),
            lease_expires_at: now.saturating_add(claim.lease_ms),
            now,
            started: started.map(|_| EventWrite {
                id: Uuid::now_v7(),
                event_type: ProgressEventType::Started,
                key: "started".into(),
                // The row is locked, so the claim's attempt is the next of the ones it read.
                payload: json!({ "worker_id": claim.worker_id, "attempt": due.execution_attempts + 1 }),
            }),
        };
        if webhooks {
            self.signals.push(TaskSignal::changed(due.id).with_webhooks(true));
        }
        self.leases.push((due, lease));
        Ok(true)
    }

    /// Writes the leases, commits (or rolls back an empty transaction) and returns them.
    async fn commit(self, notifier: &Notifier, claim: &Claim<'_>, now: i64) -> Result<Vec<Claimed>, LifecycleError> {
        let Self { txn, leases, mut signals, .. } = self;
        if leases.is_empty() && signals.is_empty() {
            txn.rollback().await?;
            return Ok(Vec::new());
        }
        let writes: Vec<LeaseWrite> = leases.iter().map(|(_, write)| write.clone()).collect();
        let leased = store::claims::lease(&txn, &writes).await?;
        let mut claimed = Vec::with_capacity(leased.len());
        for ((due, write), leased) in leases.into_iter().zip(leased) {
            record_claim(&due, now);
            let mut webhooks = false;
            if let (Some(started), Some(event)) = (leased.started, &write.started)
                && started.new
                && leased.any_endpoint
            {
                webhooks = crate::webhooks::enqueue(
                    &txn,
                    &leased.job,
                    event.event_type,
                    leased.job.stage,
                    started.sequence,
                    &event.payload,
                    now,
                )
                .await?;
            }
            signals.push(TaskSignal::changed(leased.job.id).with_webhooks(webhooks));
            let lease = Lease { job_id: write.job_id, token: write.token, worker_id: claim.worker_id.to_owned() };
            claimed.push(Claimed { job: leased.job, lease, grant: leased.grant });
        }
        commit(txn, notifier, signals).await?;
        Ok(claimed)
    }
}

/// What a claim of `due` tells the metrics.
fn record_claim(due: &job::Model, now: i64) {
    if due.stage == Stage::Queued {
        // Created → first claim: how long tasks wait for a worker.
        metrics::histogram!("research_queue_wait_seconds").record((now - due.created_at).max(0) as f64 / 1e3);
    } else if due.lease_token.is_some() {
        // A running task whose lease lapsed: its worker died or stalled, and this claim
        // rescues it.
        metrics::counter!("research_lease_rescues_total").increment(1);
    }
}

/// A paused job whose `resume_after` passed goes back to the stage it left, with a new
/// outbox entry and a `resumed` event, as an API resume would; a job waiting for a person
/// stops waiting (`timed_out`: plan approval goes on with the proposed plan, a
/// clarification without an answer). Returns the row and whether webhooks were queued.
async fn auto_resume(
    txn: &DatabaseTransaction,
    paused: job::Model,
    now: i64,
) -> Result<(job::Model, bool), LifecycleError> {
    let mut said = None;
    if let Some(open) = store::waits::open(txn, paused.id).await? {
        said = Some(end_wait(txn, open, Ending { resolution: "timed_out", ..Ending::default() }, now).await?);
    }
    let (resumed, appended) = resume_locked(txn, paused, true, said, now).await?;
    Ok((resumed, appended.webhooks))
}
