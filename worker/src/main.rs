//! The standalone worker: runs the lease loop and the outbox loop against a shared
//! database (PostgreSQL in production) until SIGTERM or SIGINT, then stops gracefully.
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use clap::Parser;
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use worker::WorkerSettings;
use worker::runtime::{CancellationToken, TaskTracker};
use worker::telemetry::LogFormat;

/// mimalloc returns freed memory to the system; glibc's allocator kept most of what a
/// burst of large documents took, spread over its per-thread arenas.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line of the `worker` binary. Settings come from the environment (over an
/// optional TOML file): `DATABASE_URL` and `KFS_WORKER_<FIELD>` (e.g. `KFS_WORKER_LEASE_MS`).
#[derive(Debug, Parser)]
#[command(name = "worker", about = "Runs research tasks: the lease loop and the outbox loop")]
struct Cli {
    /// A TOML file with `database_url` and a `[worker]` section; the environment wins over it.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// What the binary reads from its configuration.
struct Loaded {
    database_url: String,
    settings: WorkerSettings,
    log_format: LogFormat,
    /// `KFS_OTLP_ENDPOINT`: where spans are exported (off when unset or empty).
    otlp_endpoint: Option<String>,
}

fn load(cli: &Cli) -> anyhow::Result<Loaded> {
    let mut figment = Figment::new();
    if let Some(path) = &cli.config {
        figment = figment.merge(Toml::file_exact(path));
    }
    let figment =
        worker::config::environment(figment.merge(Env::prefixed("KFS_").only(&["log_format", "otlp_endpoint"])));
    let database_url: String = figment
        .extract_inner("database_url")
        .context("DATABASE_URL is required to run the worker alone (the API embeds it otherwise)")?;
    let settings: WorkerSettings = if figment.contains("worker") {
        figment.extract_inner("worker").context("reading the worker settings")?
    } else {
        WorkerSettings::default()
    };
    let log_format = if figment.contains("log_format") {
        figment.extract_inner("log_format").context("KFS_LOG_FORMAT must be text or json")?
    } else {
        LogFormat::default()
    };
    let otlp_endpoint = match figment.contains("otlp_endpoint") {
        true => Some(figment.extract_inner::<String>("otlp_endpoint").context("KFS_OTLP_ENDPOINT must be a URL")?),
        false => None,
    }
    .filter(|endpoint| !endpoint.is_empty());
    Ok(Loaded { database_url, settings, log_format, otlp_endpoint })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let Loaded { database_url, settings, log_format, otlp_endpoint } = load(&cli)?;
    let telemetry = worker::telemetry::init(log_format, otlp_endpoint.as_deref(), "kfs-worker")?;
    let engine = worker::runtime::research_engine(&settings).context("configuring the research engine")?;
    worker::observe::install();
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    // The operations endpoint answers from the start: `/healthz` while the process runs,
    // `/readyz` 503 until the database is connected and the loops tick.
    let running = Arc::new(OnceLock::new());
    if let Some(addr) = settings.http_addr {
        serve_operations(addr, running.clone(), shutdown.clone(), &tracker).await?;
    }
    // A worker started before its database (an orchestrator starts them together) waits
    // for it, logging each failed try, instead of exiting.
    let connected = worker::db::connect_and_migrate_patiently(&database_url, async {
        let _ = stop_signal().await;
    })
    .await
    .context("connecting to the database")?;
    let Some(db) = connected else {
        tracing::info!("stopped before the database could be reached");
        shutdown.cancel();
        tracker.close();
        tracker.wait().await;
        telemetry.shutdown().await;
        return Ok(());
    };
    let prepared = worker::app::startup::prepare(&db, &settings.chunk, &settings.embeddings, entity::now_millis())
        .await
        .context("preparing the knowledge spaces' passages")?;
    if prepared.split > 0 || prepared.reconciled > 0 {
        tracing::info!(
            split = prepared.split,
            reconciled = prepared.reconciled,
            "documents indexed for the current settings"
        );
    }
    tracing::info!(worker.id = %settings.worker_id, "worker started");

    let notifier = worker::Notifier::new();
    let ticks = worker::runtime::spawn_with_engine(db.clone(), notifier, settings, engine, shutdown.clone(), &tracker);
    worker::observe::spawn_gauges(db.clone(), shutdown.clone(), &tracker);
    let _ = running.set((db.clone(), ticks));
    stop_signal().await.context("listening for shutdown signals")?;
    tracing::info!("shutting down: no new claims; running stages get the grace period");
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    db.close().await.context("closing the database")?;
    telemetry.shutdown().await;
    Ok(())
}

/// Resolves on SIGINT (Ctrl-C) or, on Unix, SIGTERM (what orchestrators send).
async fn stop_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result,
            _ = terminate.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

/// The database and the loops' ticks, once the worker is connected and running.
type Running = Arc<OnceLock<(sea_orm::DatabaseConnection, worker::observe::Ticks)>>;

/// Serves `/healthz`, `/readyz` and `/metrics` on `addr` until `shutdown`; `/readyz`
/// answers 503 until `running` is set.
async fn serve_operations(
    addr: std::net::SocketAddr,
    running: Running,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> anyhow::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    let readyz = move || {
        let running = running.get().cloned();
        async move {
            let Some((db, ticks)) = running else {
                return (StatusCode::SERVICE_UNAVAILABLE, "connecting to the database".to_owned());
            };
            match worker::observe::not_ready(&db, &ticks).await {
                None => (StatusCode::OK, "ready".to_owned()),
                Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
            }
        }
    };
    let metrics = || async { ([("content-type", "text/plain; version=0.0.4")], worker::observe::render()) };
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics));
    // Printed as a line of its own, so scripts (and the tests) find the bound port.
    println!("worker operations: http://{bound}");
    tracker.spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await });
        if let Err(error) = serve.await {
            tracing::error!(error = %error, "the operations endpoint stopped with an error");
        }
    });
    Ok(())
}
