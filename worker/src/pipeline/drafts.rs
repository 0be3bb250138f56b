//! The answer draft `researchTaskAnswer` subscribers read: what generation writes into the
//! run's [`AnswerSink`], written to the task at a bounded rate, fenced by the lease.
use std::time::Duration;

use sea_orm::DatabaseConnection;

use crate::lifecycle::{self, Lease, LifecycleError};
use crate::notify::Notifier;
use crate::research::answer::AnswerSink;

/// Writes the sink to the task's answer draft whenever it changed, at most once per
/// `every`, fenced by `lease`; runs until dropped, or until the lease is lost.
pub(super) async fn flush_drafts(
    db: &DatabaseConnection,
    notifier: &Notifier,
    lease: &Lease,
    sink: &AnswerSink,
    every: Duration,
) {
    let mut generation: Option<i32> = None;
    loop {
        sink.changed().await;
        let Some(snapshot) = sink.take_snapshot() else { continue };
        if snapshot.restarted {
            generation = None;
        }
        match lifecycle::write_answer_draft(db, notifier, lease, &snapshot.text, generation, entity::now_millis()).await
        {
            Ok(written) => generation = Some(written),
            Err(LifecycleError::LeaseLost) => return std::future::pending().await,
            // A missed write is not lost: the next one carries the whole text.
            Err(error) => {
                tracing::warn!(error = %error, "writing the answer draft failed");
                sink.retry_later(&snapshot);
            }
        }
        tokio::time::sleep(every).await;
    }
}
