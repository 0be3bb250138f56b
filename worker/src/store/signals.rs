//! Signals between processes. A commit's signals (decided above the store: which tasks
//! changed and how) are announced in its transaction, so they reach other processes when
//! it commits and never when it rolls back; a process's listener turns them back into
//! in-process signals. On SQLite every writer is in one process, so there is nothing to
//! announce or hear: signals travel in-process only.
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::backend::{Backend, on_backend};
use crate::notify::{Notifier, TaskSignal};

/// Queues `signals` for other processes, delivered when `txn` commits.
pub async fn announce<C: ConnectionTrait>(txn: &C, signals: &[TaskSignal]) -> Result<(), DbErr> {
    if signals.is_empty() {
        return Ok(());
    }
    on_backend!(txn, |B| B::announce(txn, signals).await)
}

/// Starts this process's one listener for other processes' signals, which it publishes on
/// `notifier`; every (re)connect calls `on_gap` (anything sent meanwhile was missed, so
/// followers re-read). Nothing to hear on SQLite.
pub fn spawn_listener(
    db: &DatabaseConnection,
    notifier: Notifier,
    on_gap: impl Fn() + Send + Sync + 'static,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) {
    on_backend!(db, |B| B::spawn_listener(db, notifier, on_gap, shutdown, tracker));
}
