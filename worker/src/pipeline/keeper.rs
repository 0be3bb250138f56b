//! The lease keeper: one per worker, renewing every lease its running stages hold in one
//! statement per heartbeat interval (`lifecycle::heartbeats`), instead of one
//! statement and one timer per stage. A lease found lost (expired and claimed by another
//! worker, canceled, paused, deleted) fires that stage's `lost` token, which drops the
//! stage at once. Signals about held tasks (a cancel or pause committed here or, through
//! the listener, in another process) are checked as they come, gathered into one
//! statement per burst, so a canceled stage still stops within a round trip.
//!
//! It is also the only subscriber to the worker's signals on behalf of running stages:
//! a stage no longer listens itself, so a signal costs one map lookup, not one wake-up per
//! running stage.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use entity::Clock;
use sea_orm::DatabaseConnection;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::WorkerSettings;
use crate::lifecycle::{self, Lease, LeasePair};
use crate::notify::{Notifier, Signal};

/// Renews the leases of the stages running in this worker.
#[derive(Clone)]
pub struct LeaseKeeper {
    inner: Arc<Inner>,
}

struct Inner {
    db: DatabaseConnection,
    settings: Arc<WorkerSettings>,
    clock: Clock,
    held: Mutex<HashMap<Uuid, Held>>,
}

struct Held {
    token: Uuid,
    lost: CancellationToken,
}

/// One held lease; dropping it stops the renewals.
pub struct Holding {
    inner: Arc<Inner>,
    job_id: Uuid,
    token: Uuid,
    /// Fires when the lease is found lost.
    pub lost: CancellationToken,
}

impl Drop for Holding {
    fn drop(&mut self) {
        let mut held = self.inner.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A later claim of the same task by this worker holds another token: keep that.
        if held.get(&self.job_id).is_some_and(|entry| entry.token == self.token) {
            held.remove(&self.job_id);
        }
    }
}

impl LeaseKeeper {
    /// Starts the keeper's loop, which ends once the last handle to the keeper is gone.
    pub fn start(db: DatabaseConnection, notifier: &Notifier, settings: Arc<WorkerSettings>, clock: Clock) -> Self {
        let inner = Arc::new(Inner { db, settings, clock, held: Mutex::new(HashMap::new()) });
        tokio::spawn(keep(Arc::downgrade(&inner), notifier.clone()));
        Self { inner }
    }

    /// Keeps `lease` renewed until the returned holding drops.
    pub fn hold(&self, lease: &Lease) -> Holding {
        let lost = CancellationToken::new();
        let entry = Held { token: lease.token, lost: lost.clone() };
        self.inner.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(lease.job_id, entry);
        Holding { inner: self.inner.clone(), job_id: lease.job_id, token: lease.token, lost }
    }

    /// How many leases are held now.
    pub fn len(&self) -> usize {
        self.inner.held.lock().map_or(0, |held| held.len())
    }

    /// Whether no lease is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    /// Renews the held leases among `only` (all of them when `None`); fires the lost ones.
    async fn renew(&self, only: Option<&HashSet<Uuid>>) {
        let leases: Vec<LeasePair> = {
            let held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            held.iter()
                .filter(|(id, _)| only.is_none_or(|only| only.contains(id)))
                .map(|(id, entry)| LeasePair { job_id: *id, token: entry.token })
                .collect()
        };
        if leases.is_empty() {
            return;
        }
        match lifecycle::heartbeats(&self.db, &leases, self.settings.lease_ms, self.clock.now()).await {
            Ok(lost) => {
                let checked: HashMap<Uuid, Uuid> =
                    leases.into_iter().map(|lease| (lease.job_id, lease.token)).collect();
                let held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                for id in lost {
                    // Only the lease that was checked: a new claim since holds a new token.
                    if let Some(entry) = held.get(&id).filter(|entry| checked.get(&id) == Some(&entry.token)) {
                        entry.lost.cancel();
                    }
                }
            }
            // A missed beat is not fatal: the leases have slack, and every write is fenced.
            Err(error) => tracing::warn!(error = %error, "renewing leases failed"),
        }
    }

    fn holds(&self, id: Uuid) -> bool {
        self.held.lock().is_ok_and(|held| held.contains_key(&id))
    }
}

/// The keeper's loop: renew everything every heartbeat interval, and the tasks signals
/// name as they come.
async fn keep(inner: Weak<Inner>, notifier: Notifier) {
    let Some(every) = inner.upgrade().map(|inner| Duration::from_millis(inner.settings.heartbeat_ms.max(1))) else {
        return;
    };
    let mut signals = notifier.subscribe();
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate; claims and checkpoints renew the leases they take.
    ticker.tick().await;
    loop {
        let mut named = HashSet::new();
        let mut everything = false;
        tokio::select! {
            _ = ticker.tick() => everything = true,
            received = signals.recv() => match received {
                Ok(signal) => note(&signal, &mut named),
                Err(RecvError::Lagged(_)) => everything = true,
                Err(RecvError::Closed) => signals = notifier.subscribe(),
            },
        }
        // Whatever else arrived meanwhile joins the same statement.
        loop {
            match signals.try_recv() {
                Ok(signal) => note(&signal, &mut named),
                Err(TryRecvError::Lagged(_)) => everything = true,
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        let Some(inner) = inner.upgrade() else { return };
        if everything {
            inner.renew(None).await;
        } else {
            named.retain(|id| inner.holds(*id));
            if !named.is_empty() {
                // Off the loop: a cancel's check never waits behind a long renewal of
                // every lease, nor the next signals behind this check.
                tokio::spawn(async move { inner.renew(Some(&named)).await });
            }
        }
    }
}

/// Notes the task a signal names unless it was the lease holder's own write (a
/// checkpoint, an answer draft: `by_lease_holder`): only another party's commit can have
/// taken a lease.
fn note(signal: &Signal, named: &mut HashSet<Uuid>) {
    if let Signal::Task(signal) = signal
        && !signal.by_lease_holder
    {
        named.insert(signal.task_id);
    }
}
