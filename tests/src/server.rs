//! A real server on port 0 over a test database, with a GraphQL-over-HTTP client, and a
//! client for a server in a process of its own ([`GraphqlClient`]).
use std::time::Duration;

use anyhow::Context as _;
use api::auth::{Claims, mint_token};
use api::config::Settings;
use api::server::RunningServer;
use secrecy::SecretString;
use serde_json::{Value, json};

/// The JWT secret every test server uses.
pub const TEST_JWT_SECRET: &str = "kfs-test-secret-not-for-production";

/// A running API server and a client for it.
pub struct TestServer {
    /// The server; dropped at the end of the test.
    pub server: RunningServer,
    /// The HTTP client.
    pub http: reqwest::Client,
}

impl TestServer {
    /// Starts a server on `database_url`, port 0, with the embedded worker on or off.
    pub async fn start(database_url: &str, embedded_worker: bool) -> anyhow::Result<Self> {
        Self::start_with(database_url, |settings| settings.embedded_worker = embedded_worker).await
    }

    /// Starts a server on `database_url`, port 0, with the settings [`start`](Self::start)
    /// uses (embedded worker off) changed by `tweak`: a short WebSocket init timeout or
    /// ping interval, a lower limit, the embedded worker on.
    pub async fn start_with(database_url: &str, tweak: impl FnOnce(&mut Settings)) -> anyhow::Result<Self> {
        let mut settings = Settings::load(Some(std::path::Path::new("/nonexistent/kfs.toml")))?;
        settings.database_url = database_url.to_owned();
        settings.listen_addr = "127.0.0.1:0".parse()?;
        settings.jwt_secret = SecretString::from(TEST_JWT_SECRET);
        settings.embedded_worker = false;
        tweak(&mut settings);
        let server = api::server::start(settings).await?;
        Ok(Self { server, http: reqwest::Client::new() })
    }

    /// `http://127.0.0.1:PORT/graphql`.
    pub fn graphql_url(&self) -> String {
        format!("{}/graphql", self.server.base_url())
    }

    /// `ws://127.0.0.1:PORT/graphql/ws`.
    pub fn ws_url(&self) -> String {
        format!("ws://{}/graphql/ws", self.server.addr)
    }

    /// A token for `subject` in `tenant` (interactive channel), valid for an hour.
    pub fn token(subject: &str, tenant: &str) -> String {
        Self::token_with(subject, tenant, None, chrono_now() + 3600)
    }

    /// A token with every claim chosen by the test.
    pub fn token_with(subject: &str, tenant: &str, channel: Option<&str>, exp: i64) -> String {
        let claims =
            Claims { sub: subject.to_owned(), tenant: tenant.to_owned(), channel: channel.map(str::to_owned), exp };
        mint_token(&SecretString::from(TEST_JWT_SECRET), &claims).unwrap_or_default()
    }

    /// POSTs a GraphQL request as `application/json`; returns the status and the body.
    pub async fn post(&self, bearer: Option<&str>, query: &str, variables: Value) -> anyhow::Result<(u16, Value)> {
        post(&self.http, &self.graphql_url(), bearer, query, variables).await
    }

    /// Stops the server and its loops.
    pub async fn stop(self) {
        self.server.shutdown(Duration::from_secs(5)).await;
    }
}

/// A GraphQL-over-HTTP client of a server the test reaches only by its URL (the `api`
/// binary in a process of its own), acting as one caller throughout.
#[derive(Clone)]
pub struct GraphqlClient {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl GraphqlClient {
    /// A client of `graphql_url` (`http://ADDR/graphql`) presenting `token` as its bearer.
    pub fn new(graphql_url: String, token: String) -> Self {
        Self { http: reqwest::Client::new(), url: graphql_url, token }
    }

    /// The bearer token it presents, for a WebSocket of the same caller.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Runs one operation and returns the whole body, errors included; a 5xx fails.
    pub async fn call(&self, query: &str, variables: Value) -> anyhow::Result<Value> {
        let (status, body) = post(&self.http, &self.url, Some(&self.token), query, variables)
            .await
            .with_context(|| format!("sending a GraphQL request to {}", self.url))?;
        anyhow::ensure!(status < 500, "GraphQL answered {status}: {body}");
        Ok(body)
    }

    /// Runs one operation and returns its `data`; an error status or any GraphQL error fails.
    pub async fn run(&self, query: &str, variables: Value) -> anyhow::Result<Value> {
        let (status, body) = post(&self.http, &self.url, Some(&self.token), query, variables)
            .await
            .with_context(|| format!("sending a GraphQL request to {}", self.url))?;
        anyhow::ensure!(
            (200..300).contains(&status) && body.get("errors").is_none(),
            "GraphQL answered {status}: {body}"
        );
        body.get("data").cloned().context("a GraphQL response without data")
    }
}

/// POSTs a GraphQL request as `application/json` to `url`; returns the status and the body
/// (`null` when it is not JSON).
async fn post(
    http: &reqwest::Client,
    url: &str,
    bearer: Option<&str>,
    query: &str,
    variables: Value,
) -> anyhow::Result<(u16, Value)> {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .json(&json!({ "query": query, "variables": variables }));
    if let Some(bearer) = bearer {
        request = request.header("authorization", format!("Bearer {bearer}"));
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    Ok((status, body))
}

/// Seconds since the epoch.
pub fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs() as i64)
        .unwrap_or_default()
}

/// The `extensions.code` of the first error, if any.
pub fn first_error_code(body: &Value) -> Option<String> {
    body.pointer("/errors/0/extensions/code").and_then(Value::as_str).map(str::to_owned)
}

/// Binds `addr` again after the server that held it was stopped: its listener closes as
/// the aborted task unwinds, so this retries for up to a second.
pub async fn bind_again(addr: std::net::SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    let mut tries = 0;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(_) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Uploads `bytes` as file `name` into `space` through a GraphQL multipart request (with
/// the preflight header) to `graphql_url` as `token`; returns the new document's id.
pub async fn upload_file(
    http: &reqwest::Client,
    graphql_url: &str,
    token: &str,
    space: &str,
    name: &str,
    bytes: Vec<u8>,
) -> anyhow::Result<String> {
    let query = "mutation($space: UUID!, $file: Upload!) { \
        uploadKnowledgeDocument(input: { knowledgeSpaceId: $space, file: $file }) { id } }";
    let form = reqwest::multipart::Form::new()
        .text("operations", json!({ "query": query, "variables": { "space": space, "file": null } }).to_string())
        .text("map", json!({ "0": ["variables.file"] }).to_string())
        .part("0", reqwest::multipart::Part::bytes(bytes).file_name(name.to_owned()));
    let response =
        http.post(graphql_url).bearer_auth(token).header("GraphQL-Preflight", "1").multipart(form).send().await?;
    let body: Value = response.json().await?;
    body.pointer("/data/uploadKnowledgeDocument/id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .with_context(|| format!("the upload of {name} answered {body}"))
}
