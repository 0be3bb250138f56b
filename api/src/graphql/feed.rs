//! Following one task's journal: replay from the database after the client's sequence,
//! then re-read after every signal for the task. Each read starts after the last delivered
//! sequence, so a missed signal delays a row but never loses it, and replay and live rows
//! never overlap. Sequences are committed in order (the lifecycle allocates them under
//! the job's row lock), so reading "after n" never skips a row committed later.
use std::collections::VecDeque;
use std::time::Duration;

use entity::{research_task_partial_result as partial, research_task_progress_event as progress};
use futures_util::Stream;
use sea_orm::{DatabaseConnection, DbErr};
use tokio::sync::broadcast::{self, error::RecvError};
use uuid::Uuid;
use worker::TaskSignal;

use super::access;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::tasks;

/// How long a feed waits for a signal before it reads anyway: signals from other
/// processes may not reach this one, and correctness never depends on them.
const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Rows read per database round trip.
const BATCH: u64 = 100;

/// A row of a task's journal.
pub trait JournalRow: Sized + Send + 'static {
    /// Up to `BATCH` rows of the task after sequence `after`, in order.
    fn fetch(db: &DatabaseConnection, task_id: Uuid, after: i32) -> impl Future<Output = Result<Vec<Self>, DbErr>> + Send;
    /// The row's sequence.
    fn sequence(&self) -> i32;
    /// Whether nothing can follow this row (a progress event into a terminal stage).
    fn ends_feed(&self) -> bool;
}

impl JournalRow for progress::Model {
    fn fetch(db: &DatabaseConnection, task_id: Uuid, after: i32) -> impl Future<Output = Result<Vec<Self>, DbErr>> + Send {
        tasks::progress_after(db, task_id, after, BATCH)
    }
    fn sequence(&self) -> i32 { self.sequence }
    fn ends_feed(&self) -> bool { self.stage.is_terminal() }
}

impl JournalRow for partial::Model {
    fn fetch(db: &DatabaseConnection, task_id: Uuid, after: i32) -> impl Future<Output = Result<Vec<Self>, DbErr>> + Send {
        tasks::partials_after(db, task_id, after, BATCH)
    }
    fn sequence(&self) -> i32 { self.sequence }
    fn ends_feed(&self) -> bool { false }
}

/// What one read found.
enum Refill {
    /// New rows are pending.
    Rows,
    /// Nothing new and the task is terminal: nothing more will come.
    Ended,
    /// Nothing new yet.
    Empty,
}

/// The state of one subscription.
struct Feed<R> {
    app: AppState,
    caller: Principal,
    task_id: Uuid,
    last: i32,
    signals: broadcast::Receiver<TaskSignal>,
    pending: VecDeque<R>,
    finished: bool,
}

/// Follows the task's journal after `after`. Subscribe to signals before the first read,
/// so a row committed between the replay and the first wait still wakes the feed.
pub fn follow<R: JournalRow>(app: AppState, caller: Principal, task_id: Uuid, after: i32) -> impl Stream<Item = Result<R, ApiError>> {
    let signals = app.notifier.subscribe();
    let feed = Feed { app, caller, task_id, last: after, signals, pending: VecDeque::new(), finished: false };
    futures_util::stream::unfold(feed, |mut feed| async move {
        let item = feed.next().await?;
        Some((item, feed))
    })
}

impl<R: JournalRow> Feed<R> {
    /// The next row, an error that ends the feed, or `None` once the feed is over.
    async fn next(&mut self) -> Option<Result<R, ApiError>> {
        loop {
            if let Some(row) = self.pending.pop_front() {
                self.last = row.sequence();
                if row.ends_feed() {
                    self.finished = true;
                    self.pending.clear();
                }
                return Some(Ok(row));
            }
            if self.finished {
                return None;
            }
            match self.refill().await {
                Ok(Refill::Rows) => {}
                Ok(Refill::Ended) => return None,
                Ok(Refill::Empty) => self.wait().await,
                Err(error) => {
                    self.finished = true;
                    return Some(Err(error));
                }
            }
        }
    }

    /// Re-checks the caller's right to the task, then reads what follows `last`. The stage
    /// is read before the rows: a task seen terminal has committed all its rows already.
    async fn refill(&mut self) -> Result<Refill, ApiError> {
        let db = &self.app.db;
        if self.caller.expires_at.is_some_and(|at| at <= entity::now_millis()) {
            return Err(ApiError::Unauthenticated);
        }
        let task = tasks::find(db, self.task_id).await?.ok_or(ApiError::NotFound)?;
        if !access::task_is_visible(db, &self.caller, &task).await? {
            return Err(ApiError::Forbidden);
        }
        let rows = R::fetch(db, self.task_id, self.last).await?;
        if !rows.is_empty() {
            self.pending.extend(rows);
            return Ok(Refill::Rows);
        }
        Ok(if task.stage.is_terminal() { Refill::Ended } else { Refill::Empty })
    }

    /// Waits for a signal about this task, a lag (which may have hidden one), or the poll
    /// interval, whichever comes first.
    async fn wait(&mut self) {
        let deadline = tokio::time::sleep(POLL_INTERVAL);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut deadline => return,
                received = self.signals.recv() => match received {
                    Ok(signal) if signal.task_id != self.task_id => {}
                    Ok(_) | Err(RecvError::Lagged(_)) => return,
                    Err(RecvError::Closed) => {
                        (&mut deadline).await;
                        return;
                    }
                },
            }
        }
    }
}
