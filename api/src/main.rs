//! `api`: serve (the default), mint a development token, or run migrations.
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use api::auth::{Claims, mint_token};
use api::config::Settings;
use clap::{Parser, Subcommand};

/// mimalloc returns freed memory to the system; glibc's allocator kept most of what a
/// burst of large documents took, spread over its per-thread arenas.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The research-task GraphQL server.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// A TOML settings file (default: ./kfs.toml when present).
    #[arg(long, env = "KFS_CONFIG", global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve GraphQL (the default).
    Serve,
    /// Print a signed caller token for development.
    Token {
        /// The subject id (`sub`).
        #[arg(long, default_value = "alice")]
        sub: String,
        /// The tenant id.
        #[arg(long, default_value = "acme")]
        tenant: String,
        /// interactive, mcp or agent.
        #[arg(long, default_value = "interactive")]
        channel: String,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 86_400)]
        ttl: i64,
    },
    /// Apply pending migrations and exit.
    Migrate,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let settings = Settings::load(cli.config.as_deref()).context("loading settings")?;
    let otlp_endpoint = settings.otlp_endpoint.clone().filter(|endpoint| !endpoint.is_empty());
    let telemetry = worker::telemetry::init(settings.log_format, otlp_endpoint.as_deref(), "kfs-api")?;
    let outcome = run(cli.command.unwrap_or(Command::Serve), settings).await;
    telemetry.shutdown().await;
    outcome
}

async fn run(command: Command, settings: Settings) -> anyhow::Result<()> {
    match command {
        Command::Serve => serve(settings).await,
        Command::Token { sub, tenant, channel, ttl } => {
            let exp = chrono::Utc::now().timestamp() + ttl;
            let claims = Claims { sub, tenant, channel: Some(channel), exp };
            println!("{}", mint_token(&settings.jwt_secret, &claims)?);
            Ok(())
        }
        Command::Migrate => {
            settings.prepare_storage()?;
            worker::db::connect_and_migrate(&settings.database_url).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
    }
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    if settings.uses_development_secret() {
        tracing::warn!("KFS_JWT_SECRET is not set: using the public development secret (embedded SQLite only)");
    }
    // The banner is for people; with JSON logs (a machine reads stdout) the `listening`
    // event carries the address instead.
    let banner = (settings.log_format == worker::telemetry::LogFormat::Text).then(|| Banner::of(&settings));
    let server = api::server::start(settings).await?;
    if let Some(banner) = banner {
        banner.print(&server.base_url());
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    server.shutdown(Duration::from_secs(10)).await;
    Ok(())
}

/// What the start-up message says, decided from the settings before they move.
struct Banner {
    development: bool,
    database: String,
    embedded_worker: bool,
}

impl Banner {
    fn of(settings: &Settings) -> Self {
        Self {
            development: settings.uses_development_secret(),
            database: settings.describe_database(),
            embedded_worker: settings.embedded_worker,
        }
    }

    /// The lines the README's "Start it" shows.
    fn print(&self, base_url: &str) {
        println!("GraphiQL:  {base_url}/graphiql");
        if self.development {
            println!("           already carries a development token for subject `alice` in tenant `acme`");
        } else {
            println!(
                "Token:     cargo run -p api -- token --sub alice --tenant acme   (with this KFS_JWT_SECRET), then put"
            );
            println!("           {{\"Authorization\": \"Bearer <token>\"}} in GraphiQL's Headers tab");
        }
        println!("Database:  {}", self.database);
        if self.embedded_worker {
            println!("Worker:    runs in this process");
        } else {
            println!("Worker:    off here (KFS_EMBEDDED_WORKER=false); tasks run where `cargo run -p worker` runs");
        }
        println!("Stop:      Ctrl-C");
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %error, "cannot listen for Ctrl-C");
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => tracing::error!(error = %error, "cannot listen for SIGTERM"),
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
