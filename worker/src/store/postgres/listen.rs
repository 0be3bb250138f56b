//! The one PostgreSQL LISTEN connection of a process. Every NOTIFY becomes an in-process
//! [`TaskSignal`] on the process's [`Notifier`], which the worker loops and the API's live
//! subscriptions both follow. Notifications sent while the connection is down are lost,
//! so every (re)connect calls `on_gap`: whoever listens re-reads from the database.
//! Also where the signals a commit announces are queued: one NOTIFY per
//! [`SIGNALS_PER_NOTIFY`](crate::notify::SIGNALS_PER_NOTIFY) of them, delivered at commit.
use std::time::Duration;

use sea_orm::sqlx::postgres::PgListener;
use sea_orm::{ConnectionTrait, DatabaseBackend, DatabaseConnection, DbErr, Statement};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::notify::{Notifier, SIGNALS_PER_NOTIFY, TaskSignal};

/// The channel every process listens on.
pub(crate) const CHANNEL: &str = "kfs_research_task";

/// Queues the NOTIFYs of `signals` in the transaction, delivered at commit (never before,
/// never when it rolls back): each payload a JSON list of up to [`SIGNALS_PER_NOTIFY`].
pub(crate) async fn announce<C: ConnectionTrait>(txn: &C, signals: &[TaskSignal]) -> Result<(), DbErr> {
    for batch in signals.chunks(SIGNALS_PER_NOTIFY) {
        let payload = serde_json::to_string(batch).map_err(|error| DbErr::Custom(error.to_string()))?;
        let statement = Statement::from_sql_and_values(
            DatabaseBackend::Postgres,
            "SELECT pg_notify($1, $2)",
            [CHANNEL.into(), payload.into()],
        );
        txn.execute_raw(statement).await?;
    }
    Ok(())
}

/// How long to wait before connecting again after the listener failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(250);

/// Starts the listener.
pub(crate) fn spawn(
    db: &DatabaseConnection,
    notifier: Notifier,
    on_gap: impl Fn() + Send + Sync + 'static,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) {
    let pool = db.get_postgres_connection_pool().clone();
    tracker.spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                outcome = listen(&pool, &notifier, &on_gap) => {
                    if let Err(error) = outcome {
                        tracing::warn!(error = %error, "PostgreSQL listener lost; reconnecting (polling covers the gap)");
                    }
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RECONNECT_PAUSE) => {}
            }
        }
    });
}

/// One listening session; returns when the connection fails for good.
async fn listen(
    pool: &sea_orm::sqlx::PgPool,
    notifier: &Notifier,
    on_gap: &(impl Fn() + Send + Sync),
) -> Result<(), sea_orm::sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    // Anything notified before LISTEN took effect was missed.
    on_gap();
    loop {
        // `try_recv` answers `None` when the connection dropped (and reconnects on the
        // next call); whatever was notified in between is lost.
        let Some(notification) = listener.try_recv().await? else {
            on_gap();
            continue;
        };
        // One task's signal, or (from a commit that changed several, such as a batch of
        // claims) a list of them.
        match serde_json::from_str::<Signals>(notification.payload()) {
            Ok(Signals::One(signal)) => notifier.publish(signal),
            Ok(Signals::Many(signals)) => signals.into_iter().for_each(|signal| notifier.publish(signal)),
            Err(error) => tracing::warn!(error = %error, "ignoring a malformed notification"),
        }
    }
}

/// What a NOTIFY on [`CHANNEL`] carries.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Signals {
    One(TaskSignal),
    Many(Vec<TaskSignal>),
}
