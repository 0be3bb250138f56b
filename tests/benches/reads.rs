//! Reads at the database's speed: requests per second of `GET /healthz`, `{ viewer }` and
//! `researchTask(id)` against the `api` binary (release, its own process, embedded worker
//! off) on PostgreSQL, next to `pgbench -S` (one primary-key SELECT per transaction) and
//! PostGraphile 4 serving the same by-id read on the same server at the same client
//! concurrency, printed as ratios measured in one run; then SQL statements per request for
//! a list of tasks with nested fields, at two page sizes (from the server's
//! `db_statements_total`), which must not grow with the page; then, through a proxy that
//! counts what the server sends the database, the exchanges (client-to-server sends: a
//! statement, a ping, a BEGIN) per `researchTask(id)` read and per `createResearchTask`,
//! and the latency of a create at idle.
//!
//! `KFS_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p
//! workspace-tests --bench reads`; `KFS_BENCH_CLIENTS` (32) and `KFS_BENCH_SECONDS` (8)
//! change the load; `KFS_BENCH_API=<path>` measures another build of the `api` binary
//! (an earlier commit's, for a before-and-after in one sitting). Needs `pgbench` on the
//! PATH, and `npm ci --prefix tests/postgraphile` for PostGraphile (skipped without it). The load
//! generator shares the machine's cores with the server and the database, as pgbench does.
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
    let (api, profile) = match std::env::var_os("KFS_BENCH_API") {
        Some(path) => (std::path::PathBuf::from(path), "given by KFS_BENCH_API".to_owned()),
        None => {
            let ([api], profile) = build(["api"])?;
            (api, profile)
        }
    };
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
        let postgraphile = match postgraphile::start(&db.url).await? {
            Some(server) => {
                let query = "query($id: UUID!) { researchTaskJobById(id: $id) { id stage rowVersion } }";
                let body = json!({ "query": query, "variables": { "id": fixture.task } }).to_string();
                let (http, url) = (http.clone(), server.url.clone());
                Some(load(clients, seconds, move || {
                    http.post(&url).header("content-type", "application/json").body(body.clone())
                })
                .await?)
            }
            None => None,
        };
        println!("{:<48} {:>10}", "figure", "per second");
        println!("{:<48} {pgbench:>10.0}", format!("pgbench -S, {clients} clients (TPS)"));
        println!("{:<48} {healthz:>10.0}", "GET /healthz");
        println!("{:<48} {viewer:>10.0}   {:.2} of /healthz", "{ viewer { subjectId } }", viewer / healthz);
        println!("{:<48} {task:>10.0}   {:.2} of pgbench -S", "researchTask(id) { id stage rowVersion }", task / pgbench);
        match postgraphile {
            Some(rate) => println!(
                "{:<48} {rate:>10.0}   researchTask(id) is {:.2} of it",
                "PostGraphile 4, researchTaskJobById(id)",
                task / rate
            ),
            None => println!("PostGraphile 4: skipped (run `npm ci --prefix tests/postgraphile`)"),
        }
        for size in [10, 50] {
            let per_request = fixture.statements_per_list(&http, size).await?;
            println!("statements per request, researchTasks(first: {size}) with progressEvents, partialResults, answerTrace: {per_request:.1}");
        }
        exchanges::measure(&api, &db.url, &fixture).await?;
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

/// What the server sends the database, counted by a proxy in between.
mod exchanges {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use anyhow::Context as _;
    use kfs_tests::process::{ApiProcess, api_command};
    use kfs_tests::server::GraphqlClient;
    use serde_json::json;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};

    /// Reads and creates measured one after another (no concurrency: each exchange is the
    /// request's own).
    const SAMPLES: usize = 500;

    /// Prints exchanges per read and per create (through the proxy), and create latency
    /// at idle (straight to the database).
    pub async fn measure(api: &std::path::Path, database_url: &str, fixture: &super::Fixture) -> anyhow::Result<()> {
        let sends = Arc::new(AtomicU64::new(0));
        let proxy = Proxy::start(database_url, sends.clone()).await?;
        let server = ApiProcess::start(api_command(api, &proxy.url)).await?;
        let client = GraphqlClient::new(server.graphql_url(), fixture.token.clone());
        let read = "query($id: UUID!) { researchTask(id: $id) { id stage rowVersion } }";
        // Warm the pool: every connection it will use is open before counting.
        for _ in 0..50 {
            client.run(read, json!({ "id": fixture.task })).await?;
        }
        let create = "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }";
        let input = || json!({ "input": { "knowledgeSpaceId": fixture.space, "query": "How are reads counted?" } });
        let settle = || tokio::time::sleep(Duration::from_millis(300));
        settle().await;
        let before = sends.load(Ordering::SeqCst);
        for _ in 0..SAMPLES {
            client.run(read, json!({ "id": fixture.task })).await.context("a read")?;
        }
        // Connections go back to the pool after the response: let that finish.
        settle().await;
        let reads = (sends.load(Ordering::SeqCst) - before) as f64 / SAMPLES as f64;
        let before = sends.load(Ordering::SeqCst);
        for _ in 0..SAMPLES {
            client.run(create, input()).await.context("a create")?;
        }
        settle().await;
        let creates = (sends.load(Ordering::SeqCst) - before) as f64 / SAMPLES as f64;
        drop(server);
        println!("exchanges with the database per researchTask(id): {reads:.2}");
        println!("exchanges with the database per createResearchTask: {creates:.2}");

        // Latency at idle, without the proxy.
        let direct = ApiProcess::start(api_command(api, database_url)).await?;
        let client = GraphqlClient::new(direct.graphql_url(), fixture.token.clone());
        for _ in 0..20 {
            client.run(create, input()).await?;
        }
        let mut took = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let started = Instant::now();
            client.run(create, input()).await?;
            took.push(started.elapsed());
        }
        took.sort();
        let at = |quantile: f64| took[((took.len() - 1) as f64 * quantile).round() as usize];
        println!(
            "createResearchTask at idle (HTTP, one client): p50 {:.2} ms, p99 {:.2} ms",
            at(0.5).as_secs_f64() * 1e3,
            at(0.99).as_secs_f64() * 1e3
        );
        drop(direct);
        Ok(())
    }

    /// A TCP proxy to the database that counts the reads of what clients send.
    struct Proxy {
        url: String,
    }

    impl Proxy {
        async fn start(database_url: &str, sends: Arc<AtomicU64>) -> anyhow::Result<Self> {
            // postgres://user@host:port/database: the part between `@` and `/` is where to go.
            let (scheme_user, rest) = database_url.split_once('@').context("no @ in the database URL")?;
            let (upstream, path) = rest.split_once('/').context("no database in the database URL")?;
            let upstream = if upstream.contains(':') { upstream.to_owned() } else { format!("{upstream}:5432") };
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let url = format!("{scheme_user}@127.0.0.1:{}/{path}", listener.local_addr()?.port());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let (upstream, sends) = (upstream.clone(), sends.clone());
                    tokio::spawn(async move {
                        let Ok(server) = TcpStream::connect(&upstream).await else { return };
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        let (mut client_read, mut client_write) = client.into_split();
                        let (mut server_read, mut server_write) = server.into_split();
                        let up = async move {
                            let mut buffer = vec![0u8; 64 * 1024];
                            loop {
                                let read = client_read.read(&mut buffer).await?;
                                if read == 0 {
                                    return std::io::Result::Ok(());
                                }
                                sends.fetch_add(1, Ordering::SeqCst);
                                server_write.write_all(&buffer[..read]).await?;
                            }
                        };
                        let down = tokio::io::copy(&mut server_read, &mut client_write);
                        let _ = tokio::join!(up, down);
                    });
                }
            });
            Ok(Self { url })
        }
    }
}

/// PostGraphile 4 (`npm ci --prefix tests/postgraphile`: a folder of its own, as it needs
/// graphql 15 and the test clients graphql 16) serving the database, for a comparison.
mod postgraphile {
    use std::time::Duration;

    use anyhow::Context as _;
    use kfs_tests::process::Process;

    /// A running PostGraphile.
    pub struct Server {
        /// Its GraphQL endpoint.
        pub url: String,
        _process: Process,
    }

    /// Starts PostGraphile on the database at `database_url`; `None` when it is not installed.
    pub async fn start(database_url: &str) -> anyhow::Result<Option<Server>> {
        let cli =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("postgraphile/node_modules/postgraphile/cli.js");
        if !cli.is_file() {
            return Ok(None);
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut command = std::process::Command::new("node");
        command
            .arg(&cli)
            .args(["--connection", database_url, "--schema", "public", "--host", "127.0.0.1"])
            .args(["--port", &port.to_string(), "--disable-query-log", "--disable-graphiql"])
            .env("NODE_ENV", "production");
        let process = Process::spawn("postgraphile", command)?;
        let url = format!("http://127.0.0.1:{port}/graphql");
        let http = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let probe = http.post(&url).json(&serde_json::json!({ "query": "{ __typename }" })).send().await;
            if probe.is_ok_and(|response| response.status().is_success()) {
                break;
            }
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "PostGraphile did not start within 60 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = http.post(&url).send().await.context("PostGraphile")?;
        Ok(Some(Server { url, _process: process }))
    }
}
