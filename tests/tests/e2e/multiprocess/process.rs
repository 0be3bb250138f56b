//! The child processes of the multi-process test: the `api` and `worker` binaries cargo
//! builds beside this test binary, each behind a guard that kills it when dropped, so no
//! exit path (a failed assertion, a panic, the deadline) leaves one running.
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;

/// How many lines of a child's output are kept to explain its failure.
const TAIL_LINES: usize = 60;

/// The `api` and `worker` executables of this workspace.
pub struct Binaries {
    /// The GraphQL server.
    pub api: PathBuf,
    /// The standalone worker.
    pub worker: PathBuf,
}

/// Builds `api` and `worker` with the profile and target directory of this test binary
/// and returns their paths. `cargo test` builds only the e2e binary and the libraries it
/// links, never the other packages' binaries, so without this the test would run stale
/// executables (or none). After `cargo build --workspace` the build is a no-op.
pub async fn build_binaries() -> anyhow::Result<Binaries> {
    tokio::task::spawn_blocking(build_blocking).await.context("the cargo build task panicked")?
}

fn build_blocking() -> anyhow::Result<Binaries> {
    // target/<profile>/deps/e2e-<hash>: the binaries land in target/<profile>.
    let exe = std::env::current_exe().context("locating the test binary")?;
    let profile_dir = exe.parent().and_then(Path::parent).context("the test binary is not under target/<profile>/deps")?;
    let target_dir = profile_dir.parent().context("the profile directory has no parent")?;
    let profile = match profile_dir.file_name().and_then(OsStr::to_str) {
        Some("debug") => "dev",
        Some(name) => name,
        None => anyhow::bail!("cannot tell the cargo profile from {}", profile_dir.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| option_env!("CARGO").unwrap_or("cargo").into());
    let output = Command::new(cargo)
        .args(["build", "--quiet", "-p", "api", "-p", "worker", "--bins", "--profile", profile, "--target-dir"])
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .context("running cargo build -p api -p worker")?;
    anyhow::ensure!(
        output.status.success(),
        "cargo build -p api -p worker failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let binaries = Binaries { api: profile_dir.join("api"), worker: profile_dir.join("worker") };
    for binary in [&binaries.api, &binaries.worker] {
        anyhow::ensure!(binary.is_file(), "cargo built no {}", binary.display());
    }
    Ok(binaries)
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

/// A running child process. Dropping it kills it (SIGKILL) and reaps it.
pub struct Process {
    name: String,
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    stdout: mpsc::UnboundedReceiver<String>,
}

impl Process {
    /// Starts `command`, naming it `name` in errors. Both output streams are drained on
    /// threads of their own from the start: a child whose pipe fills up blocks on its next
    /// log line, which would look like a hung worker.
    pub fn spawn(name: &str, mut command: Command) -> anyhow::Result<Self> {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {name} ({})", command.get_program().to_string_lossy()))?;
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
        let (lines, stdout) = mpsc::unbounded_channel();
        if let Some(out) = child.stdout.take() {
            drain(out, Arc::clone(&tail), Some(lines));
        }
        if let Some(err) = child.stderr.take() {
            drain(err, Arc::clone(&tail), None);
        }
        Ok(Self { name: name.to_owned(), child, tail, stdout })
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

    /// Fails, with the child's last output, if it has exited: a dead server or worker
    /// would otherwise surface as a deadline much later.
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(self.failure(&format!("exited unexpectedly ({status})"))),
            Err(error) => Err(self.failure(&format!("cannot be waited on: {error}"))),
        }
    }

    /// Kills the child with SIGKILL, a crash it gets no chance to react to (no release of
    /// leases, no last checkpoint), and reaps it.
    pub fn kill(&mut self) -> anyhow::Result<ExitStatus> {
        self.child.kill().with_context(|| format!("killing {}", self.name))?;
        self.child.wait().with_context(|| format!("reaping {}", self.name))
    }

    /// An error naming the child, with its last lines of output.
    fn failure(&self, what: &str) -> anyhow::Error {
        let tail = self.tail.lock().map(|lines| lines.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default();
        anyhow::anyhow!("{} {what}; its last output:\n{tail}", self.name)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Already exited (or killed by the test) is fine: both calls then do nothing harmful.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `stream` line by line until it closes, keeping the last [`TAIL_LINES`] lines and
/// forwarding each to `lines` when given.
fn drain(stream: impl Read + Send + 'static, tail: Arc<Mutex<VecDeque<String>>>, lines: Option<mpsc::UnboundedSender<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
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
