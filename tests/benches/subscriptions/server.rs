//! The server under measurement: the `api` binary in a process of its own, so its resident
//! memory is the server's alone and not the clients'.
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use kfs_tests::process::{ApiProcess, api_command, build};

/// Builds the `api` binary with the profile of this bench binary (`release` under
/// `cargo bench`) and returns its path and where it came from; `KFS_BENCH_API_BIN` names
/// another one instead.
pub fn build_api() -> anyhow::Result<(PathBuf, String)> {
    if let Some(binary) = std::env::var_os("KFS_BENCH_API_BIN") {
        let binary = std::fs::canonicalize(&binary)
            .with_context(|| format!("KFS_BENCH_API_BIN={}", binary.to_string_lossy()))?;
        return Ok((binary, "as given by KFS_BENCH_API_BIN".to_owned()));
    }
    let ([api], profile) = build(["api"])?;
    Ok((api, format!("cargo profile `{profile}`")))
}

/// Starts `binary` on `database_url` on a free port, with the embedded worker off so the
/// tasks stay where the bench puts them, and waits until it listens.
pub async fn start(binary: &Path, database_url: &str) -> anyhow::Result<ApiProcess> {
    ApiProcess::start(api_command(binary, database_url)).await
}

/// Resident memory of a process, in KiB, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// `VmRSS`: everything resident.
    pub rss_kib: u64,
    /// `RssAnon`: the heap and stacks, without mapped files.
    pub anon_kib: u64,
}

/// The server's resident memory now; fails if it has exited.
pub fn memory(server: &mut ApiProcess) -> anyhow::Result<Memory> {
    server.process.ensure_running()?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.process.id()))
        .context("reading /proc/<pid>/status")?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .with_context(|| format!("no {name} in /proc/<pid>/status"))
    };
    Ok(Memory { rss_kib: field("VmRSS:")?, anon_kib: field("RssAnon:")? })
}
