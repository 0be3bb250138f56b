//! Watching the API keys that open WebSocket connections authenticated with. A connection
//! outlives the moment it authenticated, so when its key is revoked or rotated (in this
//! process or any other) the connection must learn it: one query per poll reads every
//! watched key at once, however many connections there are, and cancels the token of
//! each connection whose key no longer holds at the revision it presented. Expiry needs no
//! query: connections set a timer for it.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use entity::{api_key, now_millis};
use sea_orm::DatabaseConnection;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use worker::app::ApiKeyCredential;

/// Every watched key of this process.
pub struct KeyWatch {
    db: DatabaseConnection,
    /// Watchers by key id.
    entries: Mutex<HashMap<Uuid, Vec<Watcher>>>,
    next_id: AtomicU64,
    wake: Notify,
}

struct Watcher {
    id: u64,
    revision: i32,
    dead: CancellationToken,
}

/// One connection's watch on its key; dropping it stops watching.
pub struct KeyWatchGuard {
    watch: Arc<KeyWatch>,
    key_id: Uuid,
    id: u64,
    /// Cancelled once the key no longer holds at the watched revision.
    pub dead: CancellationToken,
}

impl Drop for KeyWatchGuard {
    fn drop(&mut self) {
        let mut entries = self.watch.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(watchers) = entries.get_mut(&self.key_id) {
            watchers.retain(|watcher| watcher.id != self.id);
            if watchers.is_empty() {
                entries.remove(&self.key_id);
            }
        }
    }
}

impl KeyWatch {
    /// A watch that checks its keys every `poll` (and at once after [`recheck`](Self::recheck))
    /// until `shutdown`.
    pub fn start(db: DatabaseConnection, poll: Duration, shutdown: CancellationToken) -> Arc<Self> {
        let watch = Arc::new(Self { db, entries: Mutex::default(), next_id: AtomicU64::new(0), wake: Notify::new() });
        tokio::spawn(watch.clone().run(poll, shutdown));
        watch
    }

    /// Watches `credential`'s key until the guard is dropped.
    pub fn watch(self: &Arc<Self>, credential: &ApiKeyCredential) -> KeyWatchGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let dead = CancellationToken::new();
        let watcher = Watcher { id, revision: credential.revision, dead: dead.clone() };
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.entry(credential.key_id).or_default().push(watcher);
        KeyWatchGuard { watch: self.clone(), key_id: credential.key_id, id, dead }
    }

    /// A key of this process changed: check now rather than at the next poll.
    pub fn recheck(&self) {
        self.wake.notify_one();
    }

    async fn run(self: Arc<Self>, poll: Duration, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(poll) => {}
                () = self.wake.notified() => {}
            }
            if let Err(error) = self.check().await {
                tracing::warn!(error = %error, "checking the API keys of open connections failed; trying again at the next poll");
            }
        }
    }

    /// Reads every watched key and ends the watchers whose key no longer holds.
    async fn check(&self) -> Result<(), worker::app::AppError> {
        let ids: Vec<Uuid> = self.entries.lock().unwrap_or_else(PoisonError::into_inner).keys().copied().collect();
        if ids.is_empty() {
            return Ok(());
        }
        let keys: HashMap<Uuid, api_key::Model> =
            worker::app::feeds::api_keys(&self.db, &ids).await?.into_iter().map(|key| (key.id, key)).collect();
        let now = now_millis();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|key_id, watchers| {
            watchers.retain(|watcher| {
                let holds = keys.get(key_id).is_some_and(|key| worker::app::keys::holds(key, watcher.revision, now));
                if !holds {
                    watcher.dead.cancel();
                }
                holds
            });
            !watchers.is_empty()
        });
        Ok(())
    }
}
