//! The one PostgreSQL LISTEN connection of a process. Every NOTIFY becomes an in-process
//! signal; after a reconnect every topic re-reads, since notifications sent while the
//! connection was down are lost.
use std::time::Duration;

use sea_orm::DatabaseConnection;
use sea_orm::sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;
use worker::notify::{CHANNEL, TaskSignal};

use super::LiveHub;

/// Starts the listener when the database is PostgreSQL; does nothing on SQLite, where every
/// writer is in this process.
pub fn spawn_postgres_listener(db: &DatabaseConnection, hub: LiveHub, notifier: worker::Notifier, shutdown: CancellationToken) {
    if db.get_database_backend() != sea_orm::DatabaseBackend::Postgres {
        return;
    }
    let pool = db.get_postgres_connection_pool().clone();
    tokio::spawn(async move {
        loop {
            let session = listen(&pool, &hub, &notifier);
            tokio::select! {
                () = shutdown.cancelled() => return,
                outcome = session => {
                    if let Err(error) = outcome {
                        tracing::warn!(error = %error, "PostgreSQL listener lost; reconnecting");
                    }
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    });
}

/// One listening session; returns when the connection fails.
async fn listen(pool: &sea_orm::sqlx::PgPool, hub: &LiveHub, notifier: &worker::Notifier) -> Result<(), sea_orm::sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    // Anything notified before this LISTEN took effect was missed: catch up.
    hub.wake(None);
    loop {
        // `try_recv` answers `None` when the connection dropped (and reconnects on the
        // next call); signals in between were lost, so every topic re-reads.
        match listener.try_recv().await? {
            Some(notification) => match serde_json::from_str::<TaskSignal>(notification.payload()) {
                Ok(signal) => notifier.publish(signal),
                Err(error) => tracing::warn!(error = %error, "ignoring a malformed notification"),
            },
            None => hub.wake(None),
        }
    }
}
