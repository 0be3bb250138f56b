//! Reads at the database's speed: requests per second of `GET /healthz`, `{ viewer }` and
//! `researchTask(id)` against the `api` binary (release, its own process, embedded worker
//! off) on PostgreSQL, next to `pgbench -S` (one primary-key SELECT per transaction) on
//! the same server at the same client concurrency, printed as ratios measured in one run;
//! then SQL statements per request for a list of tasks with nested fields, at two page
//! sizes (from the server's `db_statements_total`), which must not grow with the page.
//!
//! `KFS_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p
//! workspace-tests --bench reads`; `KFS_BENCH_CLIENTS` (32) and `KFS_BENCH_SECONDS` (8)
//! change the load. Needs `pgbench` on the PATH. The load generator shares the machine's
//! cores with the server and the database, as pgbench does.
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kfs_tests::process::{ApiProcess, api_command, build};
use kfs_tests::server::TestServer;
use kfs_tests::{Backend, TestConfig, TestDb};
use serde_json::{Value, json};

fn main() -> ExitCode {
    kfs_tests::bench::main("reads", run)
}

fn run() -> anyhow::Result<()> {
    let config = TestConfig::from_env();
    if config.postgres_url.is_none() {
        println!("reads: skipped, KFS_TEST_POSTGRES_URL is not set (the figures are PostgreSQL's)");
        return Ok(());
    }
    let clients = usize::try_from(kfs_tests::bench::env_number("KFS_BENCH_CLIENTS", 32)?)?;
    let seconds = Duration::from_secs(kfs_tests::bench::env_number("KFS_BENCH_SECONDS", 8)?);
    let ([api], profile) = build(["api"])?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(TestDb::run(Backend::Postgres, &config, |db| async move {
        let server = ApiProcess::start(api_command(&api, &db.url)).await?;
        println!(
            "api: {} (profile {profile}), embedded worker off; {clients} clients, {seconds:?} per figure, {} CPUs",
            api.display(),
            std::thread::available_parallelism().map_or(1, usize::from)
        );
        let fixture = Fixture::create(&server).await?;
        let pgbench = kfs_tests::bench::pgbench(&db.url, kfs_tests::bench::Pgbench::Select, clients, seconds).await?;
        let base = format!("http://{}", server.addr);
        let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build()?;
        let healthz = load(clients, seconds, {
            let (http, url) = (http.clone(), format!("{base}/healthz"));
            move || http.get(&url)
        })
        .await?;
        let viewer = load(clients, seconds, fixture.graphql(&http, "{ viewer { subjectId } }", json!({}))).await?;
        let read = "query($id: UUID!) { researchTask(id: $id) { id stage rowVersion } }";
        let task = load(clients, seconds, fixture.graphql(&http, read, json!({ "id": fixture.task }))).await?;
        println!("{:<48} {:>10}", "figure", "per second");
        println!("{:<48} {pgbench:>10.0}", format!("pgbench -S, {clients} clients (TPS)"));
        println!("{:<48} {healthz:>10.0}", "GET /healthz");
        println!("{:<48} {viewer:>10.0}   {:.2} of /healthz", "{ viewer { subjectId } }", viewer / healthz);
        println!("{:<48} {task:>10.0}   {:.2} of pgbench -S", "researchTask(id) { id stage rowVersion }", task / pgbench);
        for size in [10, 50] {
            let per_request = fixture.statements_per_list(&http, size).await?;
            println!("statements per request, researchTasks(first: {size}) with progressEvents, partialResults, answerTrace: {per_request:.1}");
        }
        println!("load average: {}", std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim());
        Ok(())
    }))
}

/// A caller with a space and tasks.
struct Fixture {
    graphql_url: String,
    metrics_url: String,
    token: String,
    space: String,
    task: String,
}

impl Fixture {
    async fn create(server: &ApiProcess) -> anyhow::Result<Self> {
        let tenant = format!("tenant-{}", uuid::Uuid::new_v4().simple());
        let token = TestServer::token("reader", &tenant);
        let client = kfs_tests::server::GraphqlClient::new(server.graphql_url(), token.clone());
        let space =
            client.run("mutation { createKnowledgeSpace(input: { name: \"Reads\" }) { id } }", json!({})).await?;
        let space = space["createKnowledgeSpace"]["id"].as_str().context("no space")?.to_owned();
        let mut task = String::new();
        for index in 0..60 {
            let input = json!({ "knowledgeSpaceId": space, "query": format!("Question {index}?") });
            let created = client
                .run(
                    "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }",
                    json!({ "input": input }),
                )
                .await?;
            task = created["createResearchTask"]["id"].as_str().context("no task")?.to_owned();
        }
        Ok(Self {
            graphql_url: server.graphql_url(),
            metrics_url: format!("http://{}/metrics", server.addr),
            token,
            space,
            task,
        })
    }

    /// A request maker for one GraphQL operation as this caller.
    fn graphql(
        &self,
        http: &reqwest::Client,
        query: &str,
        variables: Value,
    ) -> impl Fn() -> reqwest::RequestBuilder + Clone + Send + 'static {
        let (http, url, token) = (http.clone(), self.graphql_url.clone(), self.token.clone());
        let body = json!({ "query": query, "variables": variables }).to_string();
        move || http.post(&url).bearer_auth(&token).header("content-type", "application/json").body(body.clone())
    }

    /// Statements the server sent per list request of `size` tasks with nested fields.
    async fn statements_per_list(&self, http: &reqwest::Client, size: u64) -> anyhow::Result<f64> {
        let query = "query($space: UUID!, $first: Int) { researchTasks(knowledgeSpaceId: $space, first: $first) { edges { node { id progressEvents(first: 5) { sequence } partialResults(first: 5) { sequence } answerTrace { id } } } } }";
        let body = json!({ "query": query, "variables": { "space": self.space, "first": size } });
        const REQUESTS: u64 = 20;
        let before = self.statements(http).await?;
        for _ in 0..REQUESTS {
            let response: Value =
                http.post(&self.graphql_url).bearer_auth(&self.token).json(&body).send().await?.json().await?;
            anyhow::ensure!(response.get("errors").is_none(), "the list failed: {response}");
            let edges = response["data"]["researchTasks"]["edges"].as_array().map_or(0, Vec::len) as u64;
            anyhow::ensure!(edges == size, "the list returned {edges} tasks, not {size}");
        }
        let after = self.statements(http).await?;
        Ok((after - before) as f64 / REQUESTS as f64)
    }

    async fn statements(&self, http: &reqwest::Client) -> anyhow::Result<u64> {
        let page = http.get(&self.metrics_url).send().await?.text().await?;
        page.lines()
            .find_map(|line| line.strip_prefix("db_statements_total ")?.trim().parse::<f64>().ok())
            .map(|value| value as u64)
            .context("no db_statements_total in /metrics")
    }
}

/// Requests per second `clients` concurrent loops of `request` complete in `duration`;
/// every answer must be a 200.
async fn load<F>(clients: usize, duration: Duration, request: F) -> anyhow::Result<f64>
where
    F: Fn() -> reqwest::RequestBuilder + Clone + Send + 'static,
{
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + duration;
    let started = Instant::now();
    let mut loops = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (request, done) = (request.clone(), done.clone());
        loops.push(tokio::spawn(async move {
            while Instant::now() < until {
                let status = send_request(request()).await?;
                anyhow::ensure!(status == 200, "a request answered {status}");
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    for handle in loops {
        handle.await??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// Sends one request and answers its status; a GraphQL error fails.
async fn send_request(request: reqwest::RequestBuilder) -> anyhow::Result<u16> {
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body = response.bytes().await?;
    anyhow::ensure!(!body.starts_with(b"{\"errors\""), "an error: {}", String::from_utf8_lossy(&body));
    Ok(status)
}
