//! The boundary committer: one per worker, gathering the stage boundaries its running
//! tasks reach at about the same time into group commits (`lifecycle::commit_boundaries`).
//! It never waits to fill a group: a boundary that finds a commit slot free is committed
//! at once, alone; boundaries that arrive while every slot is busy wait for the next one
//! and are committed together. So an idle worker commits each boundary as soon as it is
//! reached, and a busy one pays one commit for many boundaries.
use std::sync::Arc;

use sea_orm::DatabaseConnection;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::lifecycle::{Boundary, Committed, LifecycleError, commit_boundaries};
use crate::notify::Notifier;

/// The most boundaries one transaction commits: enough that a commit's cost is shared
/// widely, few enough that the row locks a group holds are held briefly.
const MAX_GROUP: usize = 32;

type Reply = oneshot::Sender<Result<Committed, LifecycleError>>;

/// Hands boundaries to the worker's committer.
#[derive(Clone)]
pub struct BoundaryCommitter {
    queue: mpsc::UnboundedSender<(Boundary, Reply)>,
}

impl BoundaryCommitter {
    /// Starts the committer on the current runtime; it stops once every handle is dropped.
    pub fn start(db: DatabaseConnection, notifier: Notifier) -> Self {
        let (queue, waiting) = mpsc::unbounded_channel();
        let slots = crate::store::writers_at_once(&db);
        tokio::spawn(gather(db, notifier, waiting, Arc::new(Semaphore::new(slots))));
        Self { queue }
    }

    /// Commits `boundary`, alone or with others; its result is the same either way.
    pub async fn commit(&self, boundary: Boundary) -> Result<Committed, LifecycleError> {
        let (reply, result) = oneshot::channel();
        self.queue.send((boundary, reply)).map_err(|_| stopped())?;
        result.await.map_err(|_| stopped())?
    }
}

fn stopped() -> LifecycleError {
    LifecycleError::Database(sea_orm::DbErr::Custom("the boundary committer stopped".into()))
}

async fn gather(
    db: DatabaseConnection,
    notifier: Notifier,
    mut waiting: mpsc::UnboundedReceiver<(Boundary, Reply)>,
    slots: Arc<Semaphore>,
) {
    loop {
        // A slot first: while every slot is busy, boundaries queue up for the next group.
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let Some(first) = waiting.recv().await else { return };
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match waiting.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let (db, notifier) = (db.clone(), notifier.clone());
        tokio::spawn(async move {
            let (boundaries, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
            metrics::histogram!("research_group_commit_boundaries").record(boundaries.len() as f64);
            let results = commit_boundaries(&db, &notifier, boundaries).await;
            for (reply, result) in replies.into_iter().zip(results) {
                // A run that stopped waiting (its worker aborting) simply is not told.
                let _ = reply.send(result);
            }
            drop(slot);
        });
    }
}
