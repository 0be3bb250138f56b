//! A private PostgreSQL cluster for one test: initdb in a temporary directory, a free port,
//! start, restart and stop with `pg_ctl`. The shared server other tests run on is never
//! touched; a guard stops this one and removes its files however the test ends.
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context as _, ensure};
use uuid::Uuid;

/// Where Debian and Ubuntu install the PostgreSQL 15 server binaries.
const BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

/// PostgreSQL refuses to run as root: as root, the cluster belongs to this user.
const SERVER_USER: &str = "postgres";

/// A running private cluster. Dropping it stops the server (immediate mode: nothing in it
/// is worth a checkpoint) and removes its directory.
pub struct PrivatePostgres {
    dir: PathBuf,
    port: u16,
    as_server_user: bool,
}

/// A `pg_ctl` action on the running cluster.
#[derive(Debug, Clone, Copy)]
pub enum Control {
    /// `pg_ctl restart -m fast`: what an operator does; every session is terminated.
    Restart,
    /// `pg_ctl stop -m fast`: the server goes away until [`Control::Start`].
    Stop,
    /// `pg_ctl start`, with the options of the first start.
    Start,
}

impl PrivatePostgres {
    /// Creates and starts a cluster on a free port, trusting local connections.
    pub async fn start() -> anyhow::Result<Self> {
        tokio::task::spawn_blocking(Self::start_blocking).await.context("the cluster setup panicked")?
    }

    fn start_blocking() -> anyhow::Result<Self> {
        ensure!(Path::new(BIN_DIR).join("pg_ctl").is_file(), "no PostgreSQL 15 server binaries in {BIN_DIR}");
        let dir = std::env::temp_dir().join(format!("kfs-private-pg-{}", Uuid::new_v4().simple()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let as_server_user = is_root()?;
        // Built before anything can fail, so the directory is removed on every path.
        let cluster = Self { dir, port: free_port()?, as_server_user };
        if as_server_user {
            let (uid, gid) = ids_of(SERVER_USER)?;
            std::os::unix::fs::chown(&cluster.dir, Some(uid), Some(gid))
                .context("handing the directory to postgres")?;
        }
        let data = cluster.data_dir();
        // --no-sync: the cluster lives for one test, durability across a power cut is moot.
        cluster.run(
            "initdb",
            &["-D", &data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"],
        )?;
        cluster.run("pg_ctl", &cluster.pg_ctl_args(Control::Start))?;
        Ok(cluster)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`: the cluster is the test's alone, so
    /// its default database is the test's database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Restarts, stops or starts the server, waiting until it is done.
    pub async fn control(&self, action: Control) -> anyhow::Result<()> {
        let mut command = self.command("pg_ctl", &self.pg_ctl_args(action));
        let what = format!("pg_ctl {action:?}");
        let output = tokio::task::spawn_blocking(move || run(&mut command, &what)).await.context("pg_ctl panicked")?;
        output.map(|_| ())
    }

    /// `pg_ctl`'s arguments for `action`. Every start and restart names the log file:
    /// without `-l` the server would write to pg_ctl's stdout, our pipe, and waiting for
    /// pg_ctl's output would wait for the server to exit.
    fn pg_ctl_args(&self, action: Control) -> Vec<String> {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off -c max_connections=50",
            self.port,
            self.dir.display()
        );
        let log = self.log_file();
        let mut args = vec!["-D".to_owned(), self.data_dir(), "-w".to_owned(), "-t".to_owned(), "30".to_owned()];
        let action_args: &[&str] = match action {
            Control::Restart => &["-l", &log, "-o", &options, "-m", "fast", "restart"],
            Control::Stop => &["-m", "fast", "stop"],
            Control::Start => &["-l", &log, "-o", &options, "start"],
        };
        args.extend(action_args.iter().map(|arg| (*arg).to_owned()));
        args
    }

    fn log_file(&self) -> String {
        self.dir.join("server.log").display().to_string()
    }

    fn data_dir(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    /// A command for one of the server binaries, as the server's user when we are root.
    fn command(&self, binary: &str, args: &[impl AsRef<str>]) -> Command {
        let program = Path::new(BIN_DIR).join(binary);
        let mut command = if self.as_server_user {
            let mut runuser = Command::new("runuser");
            runuser.args(["-u", SERVER_USER, "--"]).arg(program);
            runuser
        } else {
            Command::new(program)
        };
        // Started servers keep no pipe of ours open (`-l` sends their output to the log),
        // so waiting for the output below returns when pg_ctl does.
        command.args(args.iter().map(AsRef::as_ref)).current_dir(&self.dir).stdin(Stdio::null());
        command
    }

    fn run(&self, binary: &str, args: &[impl AsRef<str>]) -> anyhow::Result<Output> {
        run(&mut self.command(binary, args), binary)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.data_dir();
        // No pid file: the server never started (initdb or the start failed).
        if Path::new(&data).join("postmaster.pid").exists()
            && let Err(error) = self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"])
        {
            eprintln!("stopping the private PostgreSQL: {error:#}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `command`, failing with its output unless it succeeds.
fn run(command: &mut Command, what: &str) -> anyhow::Result<Output> {
    let output = command.output().with_context(|| format!("running {what}"))?;
    ensure!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(output)
}

/// A port nobody listens on right now.
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn is_root() -> anyhow::Result<bool> {
    let output = run(Command::new("id").arg("-u"), "id -u")?;
    Ok(String::from_utf8_lossy(&output.stdout).trim() == "0")
}

/// The user and group ids of `user`.
fn ids_of(user: &str) -> anyhow::Result<(u32, u32)> {
    let id = |flag: &str| -> anyhow::Result<u32> {
        let output = run(Command::new("id").args([flag, user]), "id")?;
        String::from_utf8_lossy(&output.stdout).trim().parse().with_context(|| format!("id {flag} {user}"))
    };
    Ok((id("-u")?, id("-g")?))
}
