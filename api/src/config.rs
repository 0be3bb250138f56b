//! Settings, loaded once from defaults, an optional TOML file and the environment.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use worker::config::WorkerSettings;

/// The JWT secret used when none is configured. Only the embedded SQLite default may run
/// with it; the server refuses to start on PostgreSQL without a real secret.
pub const DEVELOPMENT_JWT_SECRET: &str = "kfs-development-secret-do-not-use-in-production";

/// Everything the server reads at start.
#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    /// `DATABASE_URL`: PostgreSQL in production; a SQLite file by default.
    pub database_url: String,
    /// `KFS_LISTEN_ADDR`; port 0 picks a free port and the server logs the one it bound.
    pub listen_addr: SocketAddr,
    /// `KFS_JWT_SECRET`: the HS256 secret for caller tokens (and the one the `token`
    /// command signs with).
    pub jwt_secret: SecretString,
    /// `KFS_JWT_PREVIOUS_SECRETS`: HS256 secrets still accepted while a rotation is under
    /// way (comma-separated, or a list in `kfs.toml`); tokens are only ever signed with
    /// `jwt_secret`.
    #[serde(default, deserialize_with = "secrets_or_commas")]
    pub jwt_previous_secrets: Vec<SecretString>,
    /// `KFS_JWT_LEEWAY_SECONDS`: how far `exp` and `nbf` may be off the clock (both kinds
    /// of token). Zero by default: expired means expired.
    #[serde(default)]
    pub jwt_leeway_seconds: u64,
    /// `KFS_JWT_ISSUERS`: identity providers whose tokens are verified against their
    /// JWKS, as a JSON array of objects (see [`crate::auth::IssuerSettings`]).
    #[serde(default, deserialize_with = "crate::auth::issuers_from_env")]
    pub jwt_issuers: Vec<crate::auth::IssuerSettings>,
    /// `[[jwt.issuer]]` tables in `kfs.toml`: more issuers, as in `jwt_issuers`.
    #[serde(default)]
    pub jwt: JwtTables,
    /// `KFS_JWKS_TIMEOUT_MS`: how long one JWKS fetch may take.
    pub jwks_timeout_ms: u64,
    /// `KFS_JWKS_REFRESH_SECONDS`: a token naming a key (`kid`) the cached set lacks makes
    /// the set be fetched again, at most once per this interval per issuer.
    pub jwks_refresh_seconds: u64,
    /// `KFS_JWKS_MAX_AGE_SECONDS`: how old a cached set may grow before it is fetched
    /// again on use (while the provider is down, the cached one keeps serving).
    pub jwks_max_age_seconds: u64,
    /// `KFS_EMBEDDED_WORKER`: run the worker loops in this process.
    pub embedded_worker: bool,
    /// `KFS_DEVELOPMENT`: development mode, where the public development JWT secret is
    /// accepted and GraphiQL opens with a development token. Unset, it is on for the
    /// embedded database (a file in this process) and off for a database server, which it
    /// may never be on for ([`Settings::development_mode`]).
    #[serde(default)]
    pub development: Option<bool>,
    /// `KFS_MAX_CONTENT_BYTES`: the largest document content accepted, in UTF-8 bytes.
    pub max_content_bytes: usize,
    /// `KFS_MAX_UPLOAD_BYTES`: the largest file one upload may carry (a multipart request
    /// is bounded by it and the JSON body limit for its operations, not by the body limit).
    pub max_upload_bytes: usize,
    /// `KFS_UPLOAD_TIMEOUT_MS`: how long a multipart request's body may take to arrive.
    pub upload_timeout_ms: u64,
    /// `KFS_MAX_CONCURRENT_UPLOADS`: multipart bodies one process reads at once (a
    /// quarter of them, at least one, from one caller); the rest wait their turn unread.
    pub max_concurrent_uploads: usize,
    /// `KFS_QUOTA_UPLOAD_BYTES_PER_TENANT`: the file bytes one tenant may have stored;
    /// unset, no limit.
    #[serde(default)]
    pub quota_upload_bytes_per_tenant: Option<u64>,
    /// `KFS_MAX_BODY_BYTES`: the largest request body accepted. Unset, it follows the
    /// content limit ([`Settings::body_limit`]).
    #[serde(default)]
    pub max_body_bytes: Option<usize>,
    /// `KFS_MAX_RESPONSE_BYTES`: the largest result sent, over HTTP or as one WebSocket
    /// message; a larger one is answered with a TOO_COMPLEX error instead.
    pub max_response_bytes: usize,
    /// `KFS_WS_INIT_TIMEOUT_MS`: how long a WebSocket may wait before `connection_init`.
    pub ws_init_timeout_ms: u64,
    /// `KFS_WS_PING_INTERVAL_MS`: how often the server pings an idle WebSocket.
    pub ws_ping_interval_ms: u64,
    /// `KFS_WS_MAX_CONNECTIONS`: open WebSockets one process accepts.
    pub ws_max_connections: usize,
    /// `KFS_WS_MAX_SUBSCRIPTIONS`: operations one WebSocket may run at once.
    pub ws_max_subscriptions: usize,
    /// `KFS_WS_SEND_TIMEOUT_MS`: how long one write may wait for a client that does not
    /// read before the connection is closed with 1013.
    pub ws_send_timeout_ms: u64,
    /// `KFS_CORS_ORIGINS`: the other origins whose pages may call the API from a browser
    /// (`https://app.example.com,https://admin.example.com`, or a list in `kfs.toml`).
    /// Empty (the default) allows the same origin only.
    #[serde(default, deserialize_with = "list_or_commas")]
    pub cors_origins: Vec<String>,
    /// `KFS_PUBLIC_URL`: the base URL clients reach this server at
    /// (`https://research.example.com`), from which the MCP resource URL and every URL the
    /// server hands out are built; unset, `http://` and the address actually bound (with
    /// 127.0.0.1 for an unspecified address).
    #[serde(default)]
    pub public_url: Option<String>,
    /// `KFS_LOG_FORMAT`: `text` (the default) or `json`, one object per line.
    #[serde(default)]
    pub log_format: worker::telemetry::LogFormat,
    /// `KFS_OTLP_ENDPOINT`: an OTLP/HTTP collector's base URL (`http://collector:4318`)
    /// to export spans to, protobuf-encoded; unset or empty, nothing is exported.
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// `KFS_QUOTA_QUEUED_PER_TENANT`: the most unfinished tasks (queued, running, paused)
    /// one tenant may hold; unset, no limit.
    #[serde(default)]
    pub quota_queued_per_tenant: Option<u64>,
    /// `KFS_QUOTA_USD_PER_TENANT_PER_DAY`: what one tenant's tasks created since 00:00 UTC
    /// may have spent, in US dollars, before new tasks are refused; unset, no limit.
    #[serde(default)]
    pub quota_usd_per_tenant_per_day: Option<f64>,
    /// `KFS_RATE_REQUESTS_PER_SECOND`: requests per second one principal (a subject, or
    /// an API key) may make, in this process; unset, no limit.
    #[serde(default)]
    pub rate_requests_per_second: Option<u32>,
    /// `KFS_RATE_COST_POINTS_PER_MINUTE`: GraphQL cost points (the document's size as the
    /// guard counts it) one principal may spend per minute, in this process; unset, none.
    #[serde(default)]
    pub rate_cost_points_per_minute: Option<u32>,
    /// `KFS_RATE_TENANT_REQUESTS_PER_SECOND`: the same for all of a tenant's principals
    /// together; unset, no limit.
    #[serde(default)]
    pub rate_tenant_requests_per_second: Option<u32>,
    /// `KFS_RATE_TENANT_COST_POINTS_PER_MINUTE`: the same for cost points.
    #[serde(default)]
    pub rate_tenant_cost_points_per_minute: Option<u32>,
    /// `KFS_WS_MAX_CONNECTIONS_PER_PRINCIPAL`: open WebSockets one principal may hold in
    /// this process; unset, only the process limit applies.
    #[serde(default)]
    pub ws_max_connections_per_principal: Option<usize>,
    /// `KFS_OPERATOR_SUBJECTS`: the subjects (a JWT's `sub`, in any tenant) allowed on the
    /// operations page `/ops`; empty (the default), nobody is.
    #[serde(default, deserialize_with = "list_or_commas")]
    pub operator_subjects: Vec<String>,
    /// `KFS_WORKER_<FIELD>`: the worker loops' settings.
    #[serde(default)]
    pub worker: WorkerSettings,
}

/// The defaults, as a serializable mirror of `Settings` (secrets are not serializable).
/// The `[jwt]` section of `kfs.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct JwtTables {
    /// `[[jwt.issuer]]`: one table per identity provider.
    #[serde(default)]
    pub issuer: Vec<crate::auth::IssuerSettings>,
}

#[derive(Serialize)]
struct Defaults {
    database_url: String,
    listen_addr: String,
    jwt_secret: String,
    jwks_timeout_ms: u64,
    jwks_refresh_seconds: u64,
    jwks_max_age_seconds: u64,
    embedded_worker: bool,
    max_content_bytes: usize,
    max_upload_bytes: usize,
    upload_timeout_ms: u64,
    max_concurrent_uploads: usize,
    max_response_bytes: usize,
    ws_init_timeout_ms: u64,
    ws_ping_interval_ms: u64,
    ws_max_connections: usize,
    ws_max_subscriptions: usize,
    ws_send_timeout_ms: u64,
}

impl Default for Defaults {
    fn default() -> Self {
        Self {
            database_url: worker::db::EMBEDDED_URL.to_owned(),
            listen_addr: "127.0.0.1:8000".to_owned(),
            jwt_secret: DEVELOPMENT_JWT_SECRET.to_owned(),
            jwks_timeout_ms: 3_000,
            jwks_refresh_seconds: 60,
            jwks_max_age_seconds: 600,
            embedded_worker: true,
            max_content_bytes: 5 * 1024 * 1024,
            max_upload_bytes: 50 * 1024 * 1024,
            upload_timeout_ms: 120_000,
            max_concurrent_uploads: 32,
            max_response_bytes: 64 * 1024 * 1024,
            ws_init_timeout_ms: 10_000,
            ws_ping_interval_ms: 15_000,
            ws_max_connections: 10_000,
            ws_max_subscriptions: 100,
            ws_send_timeout_ms: 5_000,
        }
    }
}

/// A list from TOML, or one string of comma-separated items from the environment.
fn list_or_commas<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrCommas {
        List(Vec<String>),
        Commas(String),
    }
    let items = match ListOrCommas::deserialize(deserializer)? {
        ListOrCommas::List(items) => items,
        ListOrCommas::Commas(text) => text.split(',').map(str::to_owned).collect(),
    };
    Ok(items.into_iter().map(|item| item.trim().to_owned()).filter(|item| !item.is_empty()).collect())
}

/// Secrets as [`list_or_commas`] reads them.
fn secrets_or_commas<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<SecretString>, D::Error> {
    Ok(list_or_commas(deserializer)?.into_iter().map(SecretString::from).collect())
}

impl Settings {
    /// Every configured identity provider: `KFS_JWT_ISSUERS`, then `[[jwt.issuer]]`.
    pub fn issuers(&self) -> impl Iterator<Item = &crate::auth::IssuerSettings> {
        self.jwt_issuers.iter().chain(&self.jwt.issuer)
    }

    /// What verifying caller tokens is configured with.
    pub fn identity_settings(&self) -> crate::auth::IdentitySettings {
        crate::auth::IdentitySettings {
            jwt_secret: self.jwt_secret.clone(),
            jwt_previous_secrets: self.jwt_previous_secrets.clone(),
            development_secret_refused: !self.development_mode() && self.uses_development_secret(),
            leeway_seconds: self.jwt_leeway_seconds,
            issuers: self.issuers().cloned().collect(),
            jwks: crate::auth::JwksSettings {
                timeout: std::time::Duration::from_millis(self.jwks_timeout_ms.max(1)),
                refresh_interval: std::time::Duration::from_secs(self.jwks_refresh_seconds),
                max_age: std::time::Duration::from_secs(self.jwks_max_age_seconds.max(1)),
            },
        }
    }

    /// Loads defaults, then the TOML file (the given path, or `kfs.toml` if present), then
    /// `KFS_*` variables (`KFS_WORKER_<FIELD>` for the worker's), then `DATABASE_URL`.
    pub fn load(file: Option<&Path>) -> Result<Self, Box<figment::Error>> {
        let file: PathBuf = file.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("kfs.toml"));
        let figment = Figment::from(Serialized::defaults(Defaults::default()))
            .merge(Toml::file(file))
            .merge(Env::prefixed("KFS_"));
        // The same spellings the standalone worker reads: KFS_WORKER_LEASE_MS and so on.
        worker::config::environment(figment).extract().map_err(Box::new)
    }

    /// The largest request body accepted: `max_body_bytes` when set, else room for the
    /// largest content twice over (JSON escaping, or a client that writes every non-ASCII
    /// character as `\uXXXX`) and a megabyte for the rest of the request.
    pub fn body_limit(&self) -> usize {
        self.max_body_bytes.unwrap_or_else(|| self.max_content_bytes.saturating_mul(2).saturating_add(1024 * 1024))
    }

    /// The tenant quotas new tasks are checked against.
    pub fn quotas(&self) -> worker::app::Quotas {
        worker::app::Quotas {
            unfinished_per_tenant: self.quota_queued_per_tenant,
            usd_per_tenant_per_day: self.quota_usd_per_tenant_per_day,
        }
    }

    /// Whether development mode is on (`KFS_DEVELOPMENT`, by default on for the embedded
    /// database only). It is never on for a database server: there a real JWT secret or an
    /// identity provider must be configured.
    pub fn development_mode(&self) -> bool {
        worker::db::is_embedded(&self.database_url) && self.development.unwrap_or(true)
    }

    /// Whether the JWT secret is the public development one.
    pub fn uses_development_secret(&self) -> bool {
        self.jwt_secret.expose_secret() == DEVELOPMENT_JWT_SECRET
    }

    /// The database for people to read, without any credential the URL carries.
    pub fn describe_database(&self) -> String {
        worker::db::describe(&self.database_url)
    }

    /// Creates the directory of an embedded database file, so the first start just works.
    pub fn prepare_storage(&self) -> std::io::Result<()> {
        worker::db::prepare_storage(&self.database_url)
    }
}

#[cfg(test)]
#[expect(clippy::result_large_err, reason = "figment's Jail fixes the closure's error type")]
mod tests {
    use figment::Jail;

    use super::*;

    #[test]
    fn environment_overrides_the_file_and_the_defaults() {
        Jail::expect_with(|jail| {
            jail.clear_env();
            jail.create_file(
                "kfs.toml",
                "listen_addr = \"127.0.0.1:9000\"\nembedded_worker = false\n[worker]\nlease_ms = 5000\n",
            )?;
            jail.set_env("KFS_LISTEN_ADDR", "127.0.0.1:0");
            jail.set_env("KFS_WORKER_POLL_INTERVAL_MS", "250");
            jail.set_env("DATABASE_URL", "postgres://db.example/kfs");
            let settings = Settings::load(None).map_err(|error| error.to_string())?;
            assert_eq!(settings.listen_addr.to_string(), "127.0.0.1:0");
            assert!(!settings.embedded_worker, "the file's value stands where no variable overrides it");
            assert_eq!(settings.worker.lease_ms, 5000);
            assert_eq!(settings.worker.poll_interval_ms, 250);
            assert_eq!(settings.database_url, "postgres://db.example/kfs");
            assert!(!settings.development_mode());
            Ok(())
        });
    }

    #[test]
    fn identity_providers_come_from_the_environment_and_the_file() {
        Jail::expect_with(|jail| {
            jail.clear_env();
            jail.create_file(
                "kfs.toml",
                "[[jwt.issuer]]\nissuer = \"https://file.example/\"\naudience = \"kfs\"\n\
                 jwks_url = \"https://file.example/jwks.json\"\nalgorithms = [\"ES256\"]\n",
            )?;
            jail.set_env(
                "KFS_JWT_ISSUERS",
                r#"[{"issuer":"https://env.example/","audience":["kfs","app"],"jwks_url":"https://env.example/jwks","tenant_claim":"org_id"}]"#,
            );
            jail.set_env("KFS_JWT_PREVIOUS_SECRETS", "old-one, older-one");
            jail.set_env("KFS_JWT_LEEWAY_SECONDS", "30");
            let settings = Settings::load(None).map_err(|error| error.to_string())?;
            let issuers: Vec<_> = settings.issuers().map(|issuer| issuer.issuer.as_str()).collect();
            assert_eq!(issuers, ["https://env.example/", "https://file.example/"]);
            assert_eq!(settings.jwt_issuers[0].audience, ["kfs", "app"]);
            assert_eq!(settings.jwt_issuers[0].tenant_claim, "org_id");
            assert_eq!(settings.jwt.issuer[0].algorithms, ["ES256"]);
            let previous: Vec<_> = settings.jwt_previous_secrets.iter().map(|secret| secret.expose_secret()).collect();
            assert_eq!(previous, ["old-one", "older-one"]);
            assert_eq!(settings.jwt_leeway_seconds, 30);
            assert!(!format!("{settings:?}").contains("old-one"), "secrets never show in Debug");
            Ok(())
        });
    }

    #[test]
    fn with_nothing_configured_the_server_runs_embedded_on_sqlite() {
        Jail::expect_with(|jail| {
            jail.clear_env();
            let settings = Settings::load(None).map_err(|error| error.to_string())?;
            assert!(settings.development_mode() && settings.embedded_worker && settings.uses_development_secret());
            assert_eq!(settings.listen_addr.to_string(), "127.0.0.1:8000");
            Ok(())
        });
    }

    #[test]
    fn development_mode_is_a_setting_that_a_database_server_never_has() {
        Jail::expect_with(|jail| {
            jail.clear_env();
            jail.set_env("KFS_DEVELOPMENT", "false");
            assert!(!Settings::load(None).map_err(|error| error.to_string())?.development_mode());
            jail.set_env("KFS_DEVELOPMENT", "true");
            jail.set_env("DATABASE_URL", "postgres://db.example/kfs");
            assert!(!Settings::load(None).map_err(|error| error.to_string())?.development_mode());
            Ok(())
        });
    }
}
