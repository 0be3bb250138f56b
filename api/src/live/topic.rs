//! One followed task: a driver that reads new rows once and broadcasts them.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use entity::{research_task_partial_result as partial, research_task_progress_event as progress};
use sea_orm::DatabaseConnection;
use tokio::sync::{Notify, broadcast};
use uuid::Uuid;

pub use super::event::TopicEvent;
use super::journal_row::JournalRow;
use worker::app::{AppError, feeds};

/// How many events a subscriber may fall behind before it re-reads from the database.
const CAPACITY: usize = 256;
/// Rows read per round trip.
const BATCH: u64 = 100;

/// A followed task.
pub struct Topic {
    /// The task.
    pub task_id: Uuid,
    sender: broadcast::Sender<TopicEvent>,
    wake: Notify,
    grant_dirty: AtomicBool,
    closed: AtomicBool,
    /// How many subscriptions follow the answer: the draft is read only when some do.
    answer_followers: AtomicUsize,
}

/// Counts one answer follower of a topic for as long as it lives.
pub struct AnswerFollower(Arc<Topic>);

impl Drop for AnswerFollower {
    fn drop(&mut self) {
        self.0.answer_followers.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Topic {
    pub(super) fn new(task_id: Uuid) -> Arc<Self> {
        let (sender, _) = broadcast::channel(CAPACITY);
        Arc::new(Self {
            task_id,
            sender,
            wake: Notify::new(),
            grant_dirty: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            answer_followers: AtomicUsize::new(0),
        })
    }

    /// Has the driver read the answer draft too, until the returned guard drops.
    pub fn follow_answer(self: &Arc<Self>) -> AnswerFollower {
        self.answer_followers.fetch_add(1, Ordering::AcqRel);
        self.wake();
        AnswerFollower(self.clone())
    }

    /// Follows the task's events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<TopicEvent> {
        self.sender.subscribe()
    }

    /// Something about the task may have changed: read again now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// A credential changed: re-check the task's grant now, not at the next poll.
    pub fn recheck_grant(&self) {
        self.grant_dirty.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Whether the driver stopped (no subscribers left, or the task ended).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Reads and broadcasts until nobody listens or the task ends. Polls every
    /// `poll` even without a wake-up: correctness never depends on a notification.
    pub(super) async fn drive(self: Arc<Self>, db: DatabaseConnection, poll: Duration) {
        let outcome = self.run(&db, poll).await;
        if let Err(error) = outcome {
            tracing::warn!(error = %error, "live topic stopped reading; subscribers fall back to the database");
        }
        self.closed.store(true, Ordering::Release);
    }

    async fn run(&self, db: &DatabaseConnection, poll: Duration) -> Result<(), AppError> {
        // Start from what is committed now: subscribers replay the past themselves.
        let mut last_progress = feeds::last_sequence::<progress::Entity>(db, self.task_id).await?;
        let mut last_partial = feeds::last_sequence::<partial::Entity>(db, self.task_id).await?;
        let mut grant_checked = Instant::now().checked_sub(poll).unwrap_or_else(Instant::now);
        // The last draft broadcast, as (generation, length): within one generation the
        // text only grows, so that pair tells a change.
        let mut last_draft: Option<(i32, i32)> = None;
        loop {
            if self.sender.receiver_count() == 0 {
                return Ok(());
            }
            // The stage is read before the rows: a task seen terminal has committed
            // every row it will ever write, so the reads below see them all.
            let task = feeds::task(db, self.task_id).await?;
            let Some(task) = task else {
                let _ = self.sender.send(TopicEvent::Ended);
                return Ok(());
            };
            // The grant is re-checked once per poll, or at once when this process changed
            // a credential; not on every event, which would double the queries per event.
            if self.grant_dirty.swap(false, Ordering::AcqRel) || grant_checked.elapsed() >= poll {
                grant_checked = Instant::now();
                if !feeds::grant_holds(db, task.permission_snapshot_id, entity::now_millis()).await? {
                    let _ = self.sender.send(TopicEvent::GrantRevoked);
                    return Ok(());
                }
            }
            for row in read_all::<progress::Model>(db, self.task_id, last_progress).await? {
                last_progress = row.sequence;
                let _ = self.sender.send(TopicEvent::Progress(Arc::new(row)));
            }
            for row in read_all::<partial::Model>(db, self.task_id, last_partial).await? {
                last_partial = row.sequence;
                let _ = self.sender.send(TopicEvent::Partial(Arc::new(row)));
            }
            if self.answer_followers.load(Ordering::Acquire) > 0
                && let Some(row) = feeds::draft(db, self.task_id).await?
                && last_draft != Some((row.generation, row.char_count))
            {
                last_draft = Some((row.generation, row.char_count));
                let _ = self.sender.send(TopicEvent::Answer(Arc::new(row)));
            }
            if task.stage.is_terminal() {
                let _ = self.sender.send(TopicEvent::Ended);
                return Ok(());
            }
            let _ = tokio::time::timeout(poll, self.wake.notified()).await;
        }
    }
}

/// Every row after `after`, in batches.
async fn read_all<R: JournalRow>(db: &DatabaseConnection, task_id: Uuid, after: i32) -> Result<Vec<R>, AppError> {
    let mut rows = Vec::new();
    let mut cursor = after;
    loop {
        let batch = R::fetch(db, task_id, cursor, BATCH).await?;
        let full = batch.len() as u64 == BATCH;
        if let Some(last) = batch.last() {
            cursor = last.sequence();
        }
        rows.extend(batch);
        if !full {
            return Ok(rows);
        }
    }
}
