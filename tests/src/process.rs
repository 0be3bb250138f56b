//! This workspace's own binaries (`api`, `worker`) as child processes of a test or bench:
//! cargo builds them beside the running binary ([`build`]), and a [`Process`] guard kills
//! each one when dropped, so no exit path (a failed assertion, a panic, a deadline) leaves
//! one running.
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::mpsc;

use crate::server::TEST_JWT_SECRET;

/// How many lines of a child's output are kept to explain its failure.
const TAIL_LINES: usize = 60;

/// How long the `api` binary may take to print its address: it connects to and migrates
/// the database first, which on a loaded machine takes a while.
const API_STARTUP: Duration = Duration::from_secs(60);

/// Builds the workspace binaries `names` (each the binary of the package of the same name)
/// with the cargo profile and target directory of the running test or bench binary, and
/// returns their paths and that profile's name: `cargo test` gets `dev` binaries, `cargo
/// bench` `release` ones. `cargo test` and `cargo bench` build only their own targets and
/// the libraries those link, never another package's binary, so without this they would
/// run stale executables (or none). When the binaries are up to date the build is a no-op.
///
/// Blocks while cargo runs: call it from a blocking thread ([`Binaries::build`] does).
pub fn build<const N: usize>(names: [&str; N]) -> anyhow::Result<([PathBuf; N], String)> {
    // target/<profile>/deps/<binary>-<hash>: cargo puts the binaries in target/<profile>.
    let exe = std::env::current_exe().context("locating the running binary")?;
    let profile_dir =
        exe.parent().and_then(Path::parent).context("the running binary is not under target/<profile>/deps")?;
    let target_dir = profile_dir.parent().context("the profile directory has no parent")?;
    let profile = match profile_dir.file_name().and_then(OsStr::to_str) {
        Some("debug") => "dev",
        Some(name) => name,
        None => anyhow::bail!("cannot tell the cargo profile from {}", profile_dir.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| option_env!("CARGO").unwrap_or("cargo").into());
    let mut command = Command::new(cargo);
    command.args(["build", "--quiet"]);
    for name in names {
        command.args(["-p", name, "--bin", name]);
    }
    let what = format!("cargo build of {}", names.join(", "));
    let output = command
        .args(["--profile", profile, "--target-dir"])
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running the {what}"))?;
    anyhow::ensure!(
        output.status.success(),
        "the {what} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let binaries = names.map(|name| profile_dir.join(name));
    for binary in &binaries {
        anyhow::ensure!(binary.is_file(), "cargo built no {}", binary.display());
    }
    Ok((binaries, profile.to_owned()))
}

/// The `api` and `worker` executables of this workspace.
pub struct Binaries {
    /// The GraphQL server.
    pub api: PathBuf,
    /// The standalone worker.
    pub worker: PathBuf,
}

impl Binaries {
    /// [`build`]s both, on a blocking thread so the runtime's workers keep running while
    /// cargo does.
    pub async fn build() -> anyhow::Result<Self> {
        let ([api, worker], _) = tokio::task::spawn_blocking(|| build(["api", "worker"]))
            .await
            .context("the cargo build task panicked")??;
        Ok(Self { api, worker })
    }
}

/// A command for `binary` with a clean configuration: no `KFS_*` variable inherited from
/// the developer's shell (a stray `KFS_WORKER_LEASE_MS` would change what is tested), no
/// colours in logs, and the working directory outside the repository so no `kfs.toml`
/// is picked up.
pub fn command(binary: &Path) -> Command {
    let mut command = Command::new(binary);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("KFS_") {
            command.env_remove(key);
        }
    }
    command.env("NO_COLOR", "1").current_dir(std::env::temp_dir()).stdin(Stdio::null());
    command
}

/// The `api` binary serving `database_url` on a free port of 127.0.0.1, with the
/// embedded worker off (tasks run only where the test or bench puts them), tokens signed
/// with [`TEST_JWT_SECRET`] and warnings only in its log. A caller adds what else it needs.
pub fn api_command(binary: &Path, database_url: &str) -> Command {
    let mut api = command(binary);
    // A config file that cannot exist: nothing but the environment configures the server.
    api.args(["--config", "/nonexistent/kfs.toml", "serve"])
        .env("DATABASE_URL", database_url)
        .env("KFS_LISTEN_ADDR", "127.0.0.1:0")
        .env("KFS_EMBEDDED_WORKER", "false")
        .env("KFS_JWT_SECRET", TEST_JWT_SECRET)
        .env("RUST_LOG", "warn");
    api
}

/// A running child process. Dropping it kills it (SIGKILL) and reaps it.
pub struct Process {
    name: String,
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    stdout: mpsc::UnboundedReceiver<String>,
    panics: Arc<AtomicUsize>,
}

impl Process {
    /// Starts `command`, naming it `name` in errors. Both output streams are drained on
    /// threads of their own from the start: a child whose pipe fills up blocks on its next
    /// log line, which would look like a hung worker or server.
    pub fn spawn(name: &str, mut command: Command) -> anyhow::Result<Self> {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {name} ({})", command.get_program().to_string_lossy()))?;
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
        let panics = Arc::new(AtomicUsize::new(0));
        let (lines, stdout) = mpsc::unbounded_channel();
        if let Some(out) = child.stdout.take() {
            drain(out, Arc::clone(&tail), Arc::clone(&panics), Some(lines));
        }
        if let Some(err) = child.stderr.take() {
            drain(err, Arc::clone(&tail), Arc::clone(&panics), None);
        }
        Ok(Self { name: name.to_owned(), child, tail, stdout, panics })
    }

    /// Waits up to `timeout` for a stdout line starting with `prefix` and returns it.
    pub async fn line_starting_with(&mut self, prefix: &str, timeout: Duration) -> anyhow::Result<String> {
        let wait = async {
            while let Some(line) = self.stdout.recv().await {
                if line.starts_with(prefix) {
                    return Some(line);
                }
            }
            None
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Some(line)) => Ok(line),
            Ok(None) => Err(self.failure(&format!("exited before printing `{prefix}`"))),
            Err(_) => Err(self.failure(&format!("printed no `{prefix}` line within {timeout:?}"))),
        }
    }

    /// The child's next stdout line, waiting up to `timeout`; `None` once it closed stdout
    /// or nothing came in time.
    pub async fn next_line(&mut self, timeout: Duration) -> Option<String> {
        tokio::time::timeout(timeout, self.stdout.recv()).await.ok().flatten()
    }

    /// Fails, with the child's last output, if it has exited: a dead server or worker
    /// would otherwise surface as a deadline much later.
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(self.failure(&format!("exited unexpectedly ({status})"))),
            Err(error) => Err(self.failure(&format!("cannot be waited on: {error}"))),
        }
    }

    /// How many panics the child reported so far (Rust prints `panicked at` for each,
    /// even for one a task or a panic handler survived).
    pub fn panics(&self) -> usize {
        self.panics.load(Ordering::Relaxed)
    }

    /// The child's last lines of output.
    pub fn tail(&self) -> String {
        self.tail.lock().map(|lines| lines.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default()
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Kills the child with SIGKILL, a crash it gets no chance to react to (no release of
    /// leases, no last checkpoint), and reaps it.
    pub fn kill(&mut self) -> anyhow::Result<ExitStatus> {
        self.child.kill().with_context(|| format!("killing {}", self.name))?;
        self.child.wait().with_context(|| format!("reaping {}", self.name))
    }

    /// An error naming the child, with its last lines of output.
    fn failure(&self, what: &str) -> anyhow::Error {
        anyhow::anyhow!("{} {what}; its last output:\n{}", self.name, self.tail())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Already exited (or killed by the test) is fine: both calls then do nothing harmful.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `stream` line by line until it closes, keeping the last [`TAIL_LINES`] lines,
/// counting panic reports and forwarding each line to `lines` when given.
fn drain(
    stream: impl Read + Send + 'static,
    tail: Arc<Mutex<VecDeque<String>>>,
    panics: Arc<AtomicUsize>,
    lines: Option<mpsc::UnboundedSender<String>>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if line.contains("panicked at") || line.contains("has overflowed its stack") {
                panics.fetch_add(1, Ordering::Relaxed);
            }
            if let Ok(mut kept) = tail.lock() {
                if kept.len() == TAIL_LINES {
                    kept.pop_front();
                }
                kept.push_back(line.clone());
            }
            if let Some(lines) = &lines {
                // The receiver is gone once the test stopped listening; keep draining.
                let _ = lines.send(line);
            }
        }
    });
}

/// A running `api` process and the address it bound.
pub struct ApiProcess {
    /// The process; dropping it kills the server.
    pub process: Process,
    /// The address the server listens on.
    pub addr: SocketAddr,
}

impl ApiProcess {
    /// Starts `command` (an [`api_command`], perhaps with more settings) and waits for the
    /// address it prints once it listens.
    pub async fn start(command: Command) -> anyhow::Result<Self> {
        let mut process = Process::spawn("api", command)?;
        // `GraphiQL:  http://127.0.0.1:PORT/graphiql`
        let line = process.line_starting_with("GraphiQL:", API_STARTUP).await?;
        let addr = line
            .trim_start_matches("GraphiQL:")
            .trim()
            .trim_start_matches("http://")
            .trim_end_matches("/graphiql")
            .parse()
            .with_context(|| format!("no address in the api's line {line:?}"))?;
        Ok(Self { process, addr })
    }

    /// `http://ADDR/graphql`.
    pub fn graphql_url(&self) -> String {
        format!("http://{}/graphql", self.addr)
    }

    /// `ws://ADDR/graphql/ws`.
    pub fn ws_url(&self) -> String {
        format!("ws://{}/graphql/ws", self.addr)
    }
}

/// Calls `check` until it answers true, failing after `limit`. The processes share nothing
/// with the test but the database and the API, so polling them is the way to wait.
pub async fn wait_until(
    limit: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let until = Instant::now() + limit;
    while !check().await? {
        anyhow::ensure!(Instant::now() < until, "gave up after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
