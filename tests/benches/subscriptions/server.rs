//! The server under measurement: the `api` binary in a process of its own, so its resident
//! memory is the server's alone and not the clients'.
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use anyhow::Context as _;
use kfs_tests::server::TEST_JWT_SECRET;

/// How many lines of the server's output are kept to explain a failure.
const TAIL_LINES: usize = 40;

/// Builds the `api` binary with the profile of this bench binary (`release` under
/// `cargo bench`) and returns its path; `KFS_BENCH_API_BIN` names another one instead.
pub fn build_api() -> anyhow::Result<(PathBuf, String)> {
    if let Some(binary) = std::env::var_os("KFS_BENCH_API_BIN") {
        let binary = std::fs::canonicalize(&binary).with_context(|| format!("KFS_BENCH_API_BIN={}", binary.to_string_lossy()))?;
        return Ok((binary, "as given by KFS_BENCH_API_BIN".to_owned()));
    }
    // target/<profile>/deps/subscriptions-<hash>: the binary lands in target/<profile>.
    let exe = std::env::current_exe().context("locating the bench binary")?;
    let profile_dir = exe.parent().and_then(Path::parent).context("the bench binary is not under target/<profile>/deps")?;
    let target_dir = profile_dir.parent().context("the profile directory has no parent")?;
    let profile = match profile_dir.file_name().and_then(OsStr::to_str) {
        Some("debug") => "dev",
        Some(name) => name,
        None => anyhow::bail!("cannot tell the cargo profile from {}", profile_dir.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", "api", "--bin", "api", "--profile", profile, "--target-dir"])
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .status()
        .context("running cargo build -p api")?;
    anyhow::ensure!(status.success(), "cargo build -p api failed ({status})");
    Ok((profile_dir.join("api"), format!("cargo profile `{profile}`")))
}

/// A running `api` process with the embedded worker off. Dropping it kills it.
pub struct ApiProcess {
    child: Child,
    /// The address it bound.
    pub addr: SocketAddr,
    tail: Arc<Mutex<VecDeque<String>>>,
}

/// Resident memory of a process, in KiB, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// `VmRSS`: everything resident.
    pub rss_kib: u64,
    /// `RssAnon`: the heap and stacks, without mapped files.
    pub anon_kib: u64,
}

impl ApiProcess {
    /// Starts `binary` on `database_url` on a free port, with a clean configuration (no
    /// inherited `KFS_*` variable, no `kfs.toml`), and waits for the address it prints.
    pub fn start(binary: &Path, database_url: &str) -> anyhow::Result<Self> {
        let mut command = Command::new(binary);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("KFS_") {
                command.env_remove(key);
            }
        }
        command
            .env("DATABASE_URL", database_url)
            .env("KFS_LISTEN_ADDR", "127.0.0.1:0")
            .env("KFS_EMBEDDED_WORKER", "false")
            .env("KFS_JWT_SECRET", TEST_JWT_SECRET)
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().with_context(|| format!("starting {}", binary.display()))?;
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
        let (lines, received) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            drain(out, Arc::clone(&tail), Some(lines));
        }
        if let Some(err) = child.stderr.take() {
            drain(err, Arc::clone(&tail), None);
        }
        let mut server = Self { child, addr: SocketAddr::from(([127, 0, 0, 1], 0)), tail };
        loop {
            let line = received
                .recv_timeout(Duration::from_secs(60))
                .map_err(|_| server.failure("printed no `GraphiQL:` line within 60 s"))?;
            // `GraphiQL:  http://127.0.0.1:PORT/graphiql`
            if let Some(url) = line.strip_prefix("GraphiQL:") {
                let addr = url.trim().trim_start_matches("http://").trim_end_matches("/graphiql");
                server.addr = addr.parse().with_context(|| format!("parsing the address in `{line}`"))?;
                return Ok(server);
            }
        }
    }

    /// The process's resident memory now.
    pub fn memory(&mut self) -> anyhow::Result<Memory> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Err(self.failure(&format!("exited ({status})")));
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).context("reading /proc/<pid>/status")?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .with_context(|| format!("no {name} in /proc/<pid>/status"))
        };
        Ok(Memory { rss_kib: field("VmRSS:")?, anon_kib: field("RssAnon:")? })
    }

    /// `http://ADDR/graphql`.
    pub fn graphql_url(&self) -> String {
        format!("http://{}/graphql", self.addr)
    }

    fn failure(&self, what: &str) -> anyhow::Error {
        let tail = self.tail.lock().map(|lines| lines.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default();
        anyhow::anyhow!("the api process {what}; its last output:\n{tail}")
    }
}

impl Drop for ApiProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `stream` line by line until it closes, keeping the last lines and forwarding
/// each to `lines` when given. Draining matters: a server whose pipe fills up blocks.
fn drain(stream: impl std::io::Read + Send + 'static, tail: Arc<Mutex<VecDeque<String>>>, lines: Option<mpsc::Sender<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if let Ok(mut kept) = tail.lock() {
                if kept.len() == TAIL_LINES {
                    kept.pop_front();
                }
                kept.push_back(line.clone());
            }
            if let Some(lines) = &lines {
                let _ = lines.send(line);
            }
        }
    });
}
