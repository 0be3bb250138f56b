//! The process's topics, created on first subscription and dropped when their last
//! subscriber leaves.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sea_orm::DatabaseConnection;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use uuid::Uuid;
use worker::{Notifier, Signal};

use super::credentials::{KeyWatch, KeyWatchGuard};
use super::document_watch::{DocumentFollower, DocumentWatches};
use super::event::TopicEvent;
use super::topic::Topic;
use worker::app::ApiKeyCredential;

/// How often a topic reads even without a wake-up, and re-checks the task's grant: a
/// revoked grant ends subscriptions within this time.
pub const POLL: Duration = Duration::from_millis(500);

/// Every followed task of this process.
#[derive(Clone)]
pub struct LiveHub {
    db: DatabaseConnection,
    topics: Arc<Mutex<HashMap<Uuid, Arc<Topic>>>>,
    keys: Arc<KeyWatch>,
    documents: Arc<DocumentWatches>,
}

impl LiveHub {
    /// A hub that hears `notifier`'s signals (this process's commits, and other
    /// processes' through the PostgreSQL listener) until `shutdown`.
    pub fn start(db: DatabaseConnection, notifier: &Notifier, shutdown: CancellationToken) -> Self {
        let keys = KeyWatch::start(db.clone(), POLL, shutdown.clone());
        let documents = Arc::new(DocumentWatches::new(db.clone(), shutdown.clone()));
        let hub = Self { db, topics: Arc::default(), keys, documents };
        let mut signals = notifier.subscribe();
        let dispatcher = hub.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    received = signals.recv() => match received {
                        Ok(Signal::Task(signal)) => dispatcher.wake(Some(signal.task_id)),
                        Ok(Signal::WorkDue | Signal::DocumentsDue) => {}
                        // Missed signals: wake everyone; each topic reads after its cursor.
                        Err(RecvError::Lagged(_)) => dispatcher.wake(None),
                        Err(RecvError::Closed) => return,
                    },
                }
            }
        });
        hub
    }

    /// Subscribes to a task's topic, starting it if nobody follows the task yet. Call it
    /// before replaying from the database, so nothing falls between replay and live. The
    /// receiver exists before the driver starts, so the driver never sees an empty topic
    /// and stops before its first subscriber arrives.
    pub fn subscribe(&self, task_id: Uuid) -> (Arc<Topic>, broadcast::Receiver<TopicEvent>) {
        let mut topics = self.topics.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        topics.retain(|_, topic| !topic.is_closed());
        if let Some(topic) = topics.get(&task_id) {
            let receiver = topic.subscribe();
            return (topic.clone(), receiver);
        }
        let topic = Topic::new(task_id);
        let receiver = topic.subscribe();
        topics.insert(task_id, topic.clone());
        metrics::gauge!("live_topics").set(topics.len() as f64);
        let span = tracing::debug_span!("live topic", task.id = %task_id);
        tokio::spawn(topic.clone().drive(self.db.clone(), POLL).instrument(span));
        (topic, receiver)
    }

    /// Has every topic re-check its task's grant now: a key or membership of this
    /// process's changed, and some grants may have died.
    pub fn recheck_grants(&self) {
        self.keys.recheck();
        let topics = self.topics.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        topics.values().for_each(|topic| topic.recheck_grant());
    }

    /// Watches the key a WebSocket connection authenticated with: the guard's token is
    /// cancelled once the key is revoked or rotated, in any process.
    pub fn watch_key(&self, credential: &ApiKeyCredential) -> KeyWatchGuard {
        self.keys.watch(credential)
    }

    /// Follows an uploaded document's status through its one shared reader.
    pub fn follow_document(
        &self,
        id: Uuid,
        caller: &worker::app::Principal,
        may_read: super::document_watch::AccessCheck,
    ) -> DocumentFollower {
        self.documents.follow(id, caller, may_read)
    }

    /// Wakes one task's topic, or every topic (`None`, after a missed notification).
    pub fn wake(&self, task_id: Option<Uuid>) {
        let topics = self.topics.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match task_id {
            Some(id) => {
                if let Some(topic) = topics.get(&id) {
                    topic.wake();
                }
            }
            None => topics.values().for_each(|topic| topic.wake()),
        }
    }
}
