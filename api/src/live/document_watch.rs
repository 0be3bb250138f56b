//! One reader per followed document, however many follow it: a driver reads the
//! document's two rows every [`DOCUMENT_POLL`] (the extraction may run in another process,
//! whose changes no signal of this one announces) and publishes what changed on a `watch`
//! channel; every `knowledgeDocumentStatus` subscription of this process to that document
//! reads the channel, not the database. Whether each distinct caller may still read the
//! document is checked by the same driver, once per caller every [`ACCESS_POLL`], so a
//! thousand subscriptions of one viewer cost one membership read a second.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sea_orm::DatabaseConnection;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use worker::app::feeds;

use worker::app::Principal;

/// How often a followed document is read.
pub const DOCUMENT_POLL: Duration = Duration::from_millis(200);

/// How often each caller's access to a followed document is checked again.
pub const ACCESS_POLL: Duration = Duration::from_secs(1);

/// A document, its uploaded file's row and the status the two show, read together.
pub use worker::app::feeds::DocumentNow as Snapshot;

/// Whether a caller may read a space: `Some(false)` ends its subscriptions, `None` (the
/// database could not say) decides nothing. Given by the subscriber, which knows the
/// access rule; the watch only schedules it.
pub type AccessCheck =
    fn(DatabaseConnection, Principal, Uuid) -> futures_util::future::BoxFuture<'static, Option<bool>>;

/// What a document's driver read last.
#[derive(Clone)]
pub enum Found {
    /// Not read yet.
    Pending,
    /// The rows, as read.
    Present(Arc<Snapshot>),
    /// The document is gone.
    Gone,
    /// The database could not be read.
    Failed,
}

/// What a document's followers see: the last reading and the callers who may no longer
/// read the document.
#[derive(Clone)]
pub struct Reading {
    /// The last reading.
    pub found: Found,
    /// The [`caller_key`]s whose access ended.
    pub denied: Arc<HashSet<String>>,
}

/// Who a caller is for the access check: tenant, subject and the API key, if any.
pub fn caller_key(caller: &Principal) -> String {
    let key = caller.api_key.as_ref().map(|key| key.key_id.to_string()).unwrap_or_default();
    format!("{}\u{0}{}\u{0}{key}", caller.tenant_id, caller.subject_id)
}

/// The followed documents of this process.
pub struct DocumentWatches {
    db: DatabaseConnection,
    shutdown: CancellationToken,
    watches: Mutex<HashMap<Uuid, Arc<Watch>>>,
}

/// One followed document: its channel and its distinct callers.
struct Watch {
    sender: watch::Sender<Reading>,
    may_read: AccessCheck,
    callers: Mutex<HashMap<String, (Principal, usize)>>,
}

/// A subscription's hold on a document's watch; it leaves the document's callers when
/// dropped.
pub struct DocumentFollower {
    watch: Arc<Watch>,
    key: String,
    /// The document's readings.
    pub receiver: watch::Receiver<Reading>,
}

impl DocumentFollower {
    /// Who the follower is, for [`Reading::denied`].
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for DocumentFollower {
    fn drop(&mut self) {
        let mut callers = self.watch.callers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, count)) = callers.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                callers.remove(&self.key);
            }
        }
    }
}

impl DocumentWatches {
    /// No document followed yet; drivers stop at `shutdown`.
    pub fn new(db: DatabaseConnection, shutdown: CancellationToken) -> Self {
        Self { db, shutdown, watches: Mutex::default() }
    }

    /// Follows the document `id` of `caller`'s tenant, starting its driver if nobody of
    /// this process follows it yet. The reading already on the channel is marked seen:
    /// the caller read the document itself just before, so only what a read after that
    /// finds is news.
    pub fn follow(self: &Arc<Self>, id: Uuid, caller: &Principal, may_read: AccessCheck) -> DocumentFollower {
        let key = caller_key(caller);
        let mut watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        let watch = match watches.get(&id) {
            Some(watch) => watch.clone(),
            None => {
                let initial = Reading { found: Found::Pending, denied: Arc::default() };
                let sender = watch::Sender::new(initial);
                let watch = Arc::new(Watch { sender, may_read, callers: Mutex::default() });
                watches.insert(id, watch.clone());
                metrics::gauge!("live_document_watches").set(watches.len() as f64);
                tokio::spawn(self.clone().drive(id, caller.tenant_id.clone(), watch.clone()));
                watch
            }
        };
        {
            let mut callers = watch.callers.lock().unwrap_or_else(PoisonError::into_inner);
            callers.entry(key.clone()).or_insert_with(|| (caller.clone(), 0)).1 += 1;
        }
        let mut receiver = watch.sender.subscribe();
        receiver.mark_unchanged();
        DocumentFollower { watch, key, receiver }
    }

    /// Reads the document until nobody follows it (or shutdown), publishing each change.
    async fn drive(self: Arc<Self>, id: Uuid, tenant_id: String, watch: Arc<Watch>) {
        let checks_per_access = (ACCESS_POLL.as_millis() / DOCUMENT_POLL.as_millis()).max(1);
        let mut tick: u128 = 0;
        loop {
            {
                // Under the map's lock, so a follower either finds this watch alive or
                // starts a new one.
                let mut watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
                if watch.sender.receiver_count() == 0 {
                    watches.remove(&id);
                    metrics::gauge!("live_document_watches").set(watches.len() as f64);
                    return;
                }
            }
            let found = self.read(id, &tenant_id).await;
            let denied = match (&found, tick.is_multiple_of(checks_per_access)) {
                (Found::Present(snapshot), true) => Some(self.denied(&watch, snapshot.0.knowledge_space_id).await),
                _ => None,
            };
            watch.sender.send_if_modified(|reading| {
                let mut changed = !same(&reading.found, &found);
                reading.found = found;
                if let Some(denied) = denied
                    && *reading.denied != denied
                {
                    reading.denied = Arc::new(denied);
                    changed = true;
                }
                changed
            });
            tick += 1;
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(DOCUMENT_POLL) => {}
            }
        }
    }

    /// The document's rows as they are now.
    async fn read(&self, id: Uuid, tenant_id: &str) -> Found {
        match feeds::document(&self.db, tenant_id, id).await {
            Ok(Some(now)) => Found::Present(Arc::new(now)),
            Ok(None) => Found::Gone,
            Err(_) => Found::Failed,
        }
    }

    /// The callers following the document who may no longer read its space (an outage
    /// denies nobody: the next check decides).
    async fn denied(&self, watch: &Watch, space_id: Uuid) -> HashSet<String> {
        let callers: Vec<(String, Principal)> = {
            let callers = watch.callers.lock().unwrap_or_else(PoisonError::into_inner);
            callers.iter().map(|(key, (principal, _))| (key.clone(), principal.clone())).collect()
        };
        let mut denied = HashSet::new();
        for (key, principal) in callers {
            if (watch.may_read)(self.db.clone(), principal, space_id).await == Some(false) {
                denied.insert(key);
            }
        }
        denied
    }
}

/// Whether two readings show the same rows (the rows' versions and the status).
fn same(left: &Found, right: &Found) -> bool {
    match (left, right) {
        (Found::Present(left), Found::Present(right)) => version(left) == version(right) && left.2 == right.2,
        (Found::Pending, Found::Pending) | (Found::Gone, Found::Gone) | (Found::Failed, Found::Failed) => true,
        _ => false,
    }
}

/// How far a document's rows have come: its revision and last change, and its file's.
pub fn version(snapshot: &Snapshot) -> (i32, i64, i64) {
    let (document, file, _) = snapshot;
    (document.revision, document.updated_at, file.as_ref().map_or(0, |file| file.updated_at))
}
