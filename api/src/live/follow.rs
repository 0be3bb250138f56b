//! One subscription: replay from the database after the client's sequence, then follow the
//! task's topic. Each sequence is delivered exactly once and in order: live rows at or
//! below the last delivered one are skipped, and a gap (or a lagging receiver) sends the
//! subscription back to the database for exactly the missing rows.
use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::Stream;
use sea_orm::DatabaseConnection;
use tokio::sync::broadcast::{self, error::RecvError};
use uuid::Uuid;

use super::event::TopicEvent;
use super::hub::LiveHub;
pub use super::journal_row::JournalRow;
use super::topic::Topic;
use crate::error::ApiError;
use worker::app::Principal;

/// Rows read per database round trip.
const BATCH: u64 = 100;
/// How often an idle subscription checks that its topic still runs.
const TOPIC_CHECK: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a subscription keeps retrying database reads that fail (a restart, a
/// failover) before it gives up and ends with the error.
const OUTAGE_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);
/// The pause between two of those retries.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Where a subscription stands.
enum Phase {
    /// Reading from the database until it has nothing more.
    Replay,
    /// Following the topic.
    Live,
    /// The task ended: drain what the database still holds, then stop.
    Draining,
    /// Over.
    Done,
}

struct Subscription<R> {
    hub: LiveHub,
    db: DatabaseConnection,
    caller: Principal,
    task_id: Uuid,
    last: i32,
    events: broadcast::Receiver<TopicEvent>,
    topic: Arc<Topic>,
    pending: VecDeque<R>,
    phase: Phase,
    /// When the current run of failed reads began, if the last read failed.
    failing_since: Option<std::time::Instant>,
}

/// Follows the task's journal after `after`. The caller checked visibility already.
pub fn follow<R: JournalRow>(
    hub: &LiveHub,
    db: &DatabaseConnection,
    caller: Principal,
    task_id: Uuid,
    after: i32,
) -> impl Stream<Item = Result<R, ApiError>> + use<R> {
    let (topic, events) = hub.subscribe(task_id);
    let subscription = Subscription {
        hub: hub.clone(),
        db: db.clone(),
        caller,
        task_id,
        last: after,
        events,
        topic,
        pending: VecDeque::new(),
        phase: Phase::Replay,
        failing_since: None,
    };
    futures_util::stream::unfold(subscription, |mut subscription| async move {
        let item = subscription.next().await?;
        Some((item, subscription))
    })
}

impl<R: JournalRow> Subscription<R> {
    async fn next(&mut self) -> Option<Result<R, ApiError>> {
        loop {
            if let Some(row) = self.pending.pop_front() {
                self.last = row.sequence();
                if row.ends_feed() {
                    self.phase = Phase::Done;
                    self.pending.clear();
                }
                return Some(Ok(row));
            }
            // The database reads are boxed: inline, their futures would size this state
            // machine, which every idle subscription holds for as long as it follows.
            let step = match self.phase {
                Phase::Done => return None,
                Phase::Replay => Box::pin(self.replay()).await,
                Phase::Draining => Box::pin(self.drain()).await,
                Phase::Live => self.live().await,
            };
            match step {
                Ok(()) => self.failing_since = None,
                // A database that restarts or fails over loses the read, not the rows: read
                // again from the same sequence shortly, rather than end the feed.
                Err(ApiError::Unavailable(cause)) if self.still_retrying() => {
                    tracing::warn!(task.id = %self.task_id, error = format!("{cause:#}"), "a subscription's read failed; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(error) => {
                    self.phase = Phase::Done;
                    return Some(Err(error));
                }
            }
        }
    }

    /// Whether a failed read should be retried: until reads have been failing for
    /// [`OUTAGE_LIMIT`], counted from the first failure since the last success.
    fn still_retrying(&mut self) -> bool {
        self.failing_since.get_or_insert_with(std::time::Instant::now).elapsed() < OUTAGE_LIMIT
    }

    /// Reads the next batch from the database; when it is empty, goes live (or ends, for a
    /// task that was terminal already).
    async fn replay(&mut self) -> Result<(), ApiError> {
        let task = worker::app::feeds::task(&self.db, self.task_id).await?.ok_or(ApiError::NotFound)?;
        let rows = R::fetch(&self.db, self.task_id, self.last, BATCH).await?;
        if rows.is_empty() {
            self.phase = if task.stage.is_terminal() { Phase::Done } else { Phase::Live };
            // Nothing is pending here; drop the replay batches' buffer, which an idle
            // subscription would otherwise hold for as long as it follows.
            self.pending = VecDeque::new();
        }
        self.pending.extend(rows);
        Ok(())
    }

    /// After the task ended: whatever the database holds past the last delivered row.
    async fn drain(&mut self) -> Result<(), ApiError> {
        let rows = R::fetch(&self.db, self.task_id, self.last, BATCH).await?;
        if rows.is_empty() {
            self.phase = Phase::Done;
        }
        self.pending.extend(rows);
        Ok(())
    }

    /// Waits for the next topic event that concerns this subscription.
    async fn live(&mut self) -> Result<(), ApiError> {
        let event = tokio::select! {
            () = expiry(&self.caller) => return Err(ApiError::Unauthenticated),
            event = self.events.recv() => event,
            () = tokio::time::sleep(TOPIC_CHECK) => {
                // A topic whose driver stopped on a database error broadcasts nothing more:
                // take a fresh one and catch up from the database.
                if self.topic.is_closed() {
                    (self.topic, self.events) = self.hub.subscribe(self.task_id);
                    self.phase = Phase::Replay;
                }
                return Ok(());
            }
        };
        match event {
            Ok(TopicEvent::GrantRevoked) => Err(revocation(&self.db, &self.caller).await),
            Ok(TopicEvent::Ended) | Err(RecvError::Closed) => {
                self.phase = Phase::Draining;
                Ok(())
            }
            // Fell behind the topic: the database has every row the receiver dropped.
            Err(RecvError::Lagged(_)) => {
                self.phase = Phase::Replay;
                Ok(())
            }
            Ok(event) => {
                if let Some(row) = R::from_event(&event) {
                    match place(self.last, row.sequence()) {
                        Placement::Next => self.pending.push_back((*row).clone()),
                        Placement::Seen => {}
                        // Rows between the replay and this one reached the topic before we
                        // subscribed to it: read them (and this one) from the database.
                        Placement::Gap => self.phase = Phase::Replay,
                    }
                }
                Ok(())
            }
        }
    }
}

/// The error a subscription whose task's grant died ends with: UNAUTHENTICATED when the
/// caller's own API key is what died (as HTTP would answer the caller now), FORBIDDEN
/// otherwise (the grant of this one task ended).
pub(super) async fn revocation(db: &DatabaseConnection, caller: &Principal) -> ApiError {
    let Some(credential) = &caller.api_key else {
        return ApiError::Forbidden;
    };
    match worker::app::keys::credential_holds(db, credential).await {
        Ok(true) => ApiError::Forbidden,
        Ok(false) => ApiError::Unauthenticated,
        Err(error) => error,
    }
}

/// Resolves when the caller's credential expires (never, for one without an expiry).
pub(super) async fn expiry(caller: &Principal) {
    match caller.expires_at.map(|at| at - entity::now_millis()) {
        Some(left) => tokio::time::sleep(std::time::Duration::from_millis(left.max(0) as u64)).await,
        None => std::future::pending().await,
    }
}

/// Where a live row falls relative to the last delivered sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// The very next one: deliver it.
    Next,
    /// Delivered already (replay and live overlapped): skip it.
    Seen,
    /// Rows are missing before it: go back to the database for them.
    Gap,
}

/// The one rule that keeps a feed gapless and free of duplicates: only `last + 1` is
/// delivered from the topic.
fn place(last: i32, sequence: i32) -> Placement {
    match sequence.cmp(&(last + 1)) {
        std::cmp::Ordering::Equal => Placement::Next,
        std::cmp::Ordering::Less => Placement::Seen,
        std::cmp::Ordering::Greater => Placement::Gap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_next_sequence_is_delivered_from_the_topic() {
        assert_eq!(place(0, 1), Placement::Next);
        assert_eq!(place(4, 5), Placement::Next);
    }

    #[test]
    fn a_row_replay_already_delivered_is_skipped() {
        assert_eq!(place(5, 5), Placement::Seen);
        assert_eq!(place(5, 1), Placement::Seen);
    }

    #[test]
    fn a_row_past_the_next_one_sends_the_feed_back_to_the_database() {
        assert_eq!(place(0, 2), Placement::Gap);
        assert_eq!(place(7, 100), Placement::Gap);
    }
}
