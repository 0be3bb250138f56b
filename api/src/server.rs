//! Building the router and running the server (and, embedded, the worker loops).
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::http::{HeaderValue, Method, header};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::TraceLayer;
use worker::Notifier;

use crate::config::Settings;
use crate::graphql::build_schema;
use crate::http::{self, ConnectionLimits, GraphqlEndpoint, WsEndpoint};
use crate::live::LiveHub;
use crate::state::AppState;

/// A server that is accepting connections.
pub struct RunningServer {
    /// The address it bound (the real port when the settings asked for port 0).
    pub addr: SocketAddr,
    /// The shared state, for tests that want to look behind the API.
    pub state: AppState,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl RunningServer {
    /// `http://addr`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets running work reach a checkpoint, and waits for every task.
    pub async fn shutdown(self, grace: Duration) {
        self.shutdown.cancel();
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait()).await.is_err() {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "shutdown grace period passed with tasks still running"
            );
        }
    }
}

/// The CORS layer for the configured origins: pages of those origins may call the
/// GraphQL endpoint from a browser, sending `Authorization` (no cookies: credentials are
/// headers only). `None` when no origin is configured: the same origin only, which needs
/// no CORS at all. An origin that is not `scheme://host[:port]` is a start-up error.
fn cors(origins: &[String]) -> anyhow::Result<Option<CorsLayer>> {
    if origins.is_empty() {
        return Ok(None);
    }
    let mut allowed = Vec::with_capacity(origins.len());
    for origin in origins {
        let uri: axum::http::Uri =
            origin.parse().with_context(|| format!("KFS_CORS_ORIGINS: {origin:?} is not an origin"))?;
        let well_formed = matches!(uri.scheme_str(), Some("http" | "https"))
            && uri.authority().is_some()
            && uri.path_and_query().is_none_or(|path| path.as_str().is_empty() || path.as_str() == "/");
        anyhow::ensure!(well_formed, "KFS_CORS_ORIGINS: {origin:?} is not scheme://host[:port]");
        let origin = origin.trim_end_matches('/');
        allowed.push(HeaderValue::from_str(origin).with_context(|| format!("KFS_CORS_ORIGINS: {origin:?}"))?);
    }
    Ok(Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(allowed))
            .allow_methods([Method::GET, Method::POST])
            // The preflight headers uploads must carry (`http/multipart.rs`) are what makes
            // a browser ask here first; a page of an allowed origin may send them.
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::ACCEPT,
                header::HeaderName::from_static("graphql-preflight"),
                header::HeaderName::from_static("apollo-require-preflight"),
            ])
            .max_age(Duration::from_secs(600)),
    ))
}

/// The router for a state: GraphQL over HTTP and WebSocket, GraphiQL, health, metrics.
/// `shutdown` closes open WebSockets when the server stops.
pub fn router(state: AppState, shutdown: CancellationToken) -> anyhow::Result<Router> {
    let settings = &state.settings;
    let uploads = crate::http::multipart::UploadSlots::new(
        state.settings.max_concurrent_uploads,
        (state.settings.max_concurrent_uploads / 4).max(1),
    );
    let endpoint =
        GraphqlEndpoint { schema: build_schema(state.clone()), state: state.clone(), uploads: Arc::new(uploads) };
    let ws = WsEndpoint {
        graphql: endpoint.clone(),
        connections: Arc::new(Semaphore::new(settings.ws_max_connections)),
        limits: ConnectionLimits::new(
            settings.ws_init_timeout_ms,
            settings.ws_ping_interval_ms,
            settings.ws_max_subscriptions,
            settings.ws_send_timeout_ms,
            settings.max_response_bytes,
        ),
        shutdown,
    };
    let websocket = Router::new().route("/graphql/ws", get(http::graphql_ws)).with_state(ws);
    let mut graphql =
        Router::new().route("/graphql", get(http::graphql_get).post(http::graphql_post)).with_state(endpoint);
    if let Some(cors) = cors(&settings.cors_origins)? {
        graphql = graphql.layer(cors);
    }
    let mcp = crate::mcp::router(state.clone());
    let health = Router::new()
        .route("/healthz", get(http::healthz))
        .route("/readyz", get(http::readyz))
        .route("/metrics", get(http::metrics))
        .route("/graphiql", get(http::graphiql))
        .route("/ops", get(http::ops::page))
        .route("/ops/app.js", get(http::ops::script))
        // Every other path under /ops is a data route: one handler answers them all, so
        // anyone who is not an operator gets the same 404 whatever the path and method.
        .route("/ops/{*path}", axum::routing::any(http::ops::data))
        .route(&format!("{}/{{name}}", http::graphiql_assets::PREFIX), get(http::graphiql_assets::serve))
        .with_state(state);
    Ok(Router::new()
        .merge(mcp)
        .merge(graphql)
        .merge(websocket)
        .merge(health)
        .layer(axum::middleware::from_fn(http::track_metrics))
        .layer(axum::middleware::from_fn(crate::request_id::assign))
        .layer(TraceLayer::new_for_http().make_span_with(http::request_span))
        // A panic is a bug, but it must cost one request, not the connection it came on:
        // answer it as an internal error (the panic itself is logged by the hook).
        .layer(CatchPanicLayer::custom(http::panic_response)))
}

/// The base URL the server hands out: `KFS_PUBLIC_URL` (an absolute http(s) URL), or
/// `http://` and the bound address, 127.0.0.1 standing for an unspecified one.
fn public_url(configured: Option<&str>, bound: std::net::SocketAddr) -> anyhow::Result<String> {
    if let Some(configured) = configured.map(str::trim).filter(|url| !url.is_empty()) {
        let uri: axum::http::Uri =
            configured.parse().with_context(|| format!("KFS_PUBLIC_URL: {configured:?} is not a URL"))?;
        anyhow::ensure!(
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.authority().is_some(),
            "KFS_PUBLIC_URL: {configured:?} is not an absolute http(s) URL"
        );
        return Ok(configured.trim_end_matches('/').to_owned());
    }
    let host = match bound.ip() {
        ip if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
        ip => ip,
    };
    Ok(format!("http://{}", std::net::SocketAddr::new(host, bound.port())))
}

/// Connects, migrates, binds and serves; with `embedded_worker` the worker loops run in
/// this process too. Returns once the listener is bound.
pub async fn start(settings: Settings) -> anyhow::Result<RunningServer> {
    // Checks the token settings (issuers, and a real secret or a provider on PostgreSQL).
    let identity = Arc::new(crate::auth::Identity::new(settings.identity_settings())?);
    // A worker that cannot run its engine is refused before anything starts.
    let engine = match settings.embedded_worker {
        true => Some(worker::runtime::research_engine(&settings.worker).context("configuring the research engine")?),
        false => None,
    };
    settings.prepare_storage().context("creating the database directory")?;
    // A server started before its database waits for it (logging each try); a signal
    // stops the process meanwhile.
    let db = worker::db::connect_and_migrate_patiently(&settings.database_url, std::future::pending())
        .await
        .context("connecting to and migrating the database")?
        .context("stopped before the database could be reached")?;
    let prepared =
        worker::app::startup::prepare(&db, &settings.worker.chunk, &settings.worker.embeddings, entity::now_millis())
            .await
            .context("preparing the knowledge spaces' passages")?;
    if prepared.split > 0 || prepared.reconciled > 0 {
        tracing::info!(
            split = prepared.split,
            reconciled = prepared.reconciled,
            "documents indexed for the current settings"
        );
    }
    let listener =
        TcpListener::bind(settings.listen_addr).await.with_context(|| format!("binding {}", settings.listen_addr))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    http::install_metrics();
    let notifier = Notifier::new();
    let settings = Arc::new(settings);
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let live = LiveHub::start(db.clone(), &notifier, shutdown.clone());
    // The process's one LISTEN: it feeds the notifier that subscriptions and the embedded
    // worker both follow; after a gap every topic re-reads.
    let topics = live.clone();
    worker::runtime::spawn_listener(&db, notifier.clone(), move || topics.wake(None), shutdown.clone(), &tracker);
    let rates = Arc::new(crate::rate::RateLimits::from_settings(&settings));
    let idle = rates.clone();
    let stop_forgetting = shutdown.clone();
    tracker.spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
        loop {
            tokio::select! {
                () = stop_forgetting.cancelled() => return,
                _ = every.tick() => idle.forget_idle(),
            }
        }
    });
    let worker_ticks = match engine {
        Some(engine) => {
            // The listener above already wakes the embedded loops; a second LISTEN would
            // only repeat it. (Their polling covers a gap.)
            let worker_settings = worker::config::WorkerSettings { pg_listen: false, ..settings.worker.clone() };
            let (db, notifier) = (db.clone(), notifier.clone());
            worker::runtime::spawn_with_engine(db, notifier, worker_settings, engine, shutdown.clone(), &tracker)
        }
        None => worker::observe::Ticks::default(),
    };
    worker::observe::spawn_gauges(db.clone(), shutdown.clone(), &tracker);
    let public_url = public_url(settings.public_url.as_deref(), addr)?;
    let rules = worker::app::Rules {
        quotas: settings.quotas(),
        max_execution_attempts: settings.worker.default_max_execution_attempts,
        webhooks_allow_private: settings.worker.webhooks.allow_private,
        operator_subjects: settings.operator_subjects.clone().into(),
        max_content_bytes: settings.max_content_bytes,
        max_upload_bytes: settings.max_upload_bytes,
        quota_upload_bytes_per_tenant: settings.quota_upload_bytes_per_tenant,
        thread_max_turns: settings.worker.thread_max_turns,
    };
    let splitter = worker::knowledge::index::Splitter::new(settings.worker.chunk);
    let indexing =
        worker::knowledge::index::Indexing::from_settings(settings.worker.chunk, &settings.worker.embeddings);
    let app = worker::app::App { db: db.clone(), notifier: notifier.clone(), rules, splitter, indexing };
    let state = AppState {
        db,
        notifier,
        // Shared, not copied: every request clones the state.
        app: Arc::new(app),
        settings: settings.clone(),
        live,
        rates,
        identity,
        worker_ticks,
        public_url: public_url.into(),
    };
    let app = router(state.clone(), shutdown.clone())?;
    let stop = shutdown.clone();
    tracker.spawn(async move {
        let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
        // Without TCP_NODELAY a small write (a subscription's next message) waits behind the
        // last one's acknowledgement, which a client may delay by 40 ms.
        let listener = axum::serve::ListenerExt::tap_io(listener, |socket| {
            if let Err(error) = socket.set_nodelay(true) {
                tracing::debug!(error = %error, "could not set TCP_NODELAY on a connection");
            }
        });
        let serve = axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await });
        if let Err(error) = serve.await {
            tracing::error!(error = %error, "the HTTP server stopped with an error");
        }
    });
    tracing::info!(addr = %addr, "listening; GraphiQL at http://{addr}/graphiql");
    Ok(RunningServer { addr, state, shutdown, tracker })
}
