//! What the bench binaries share: running only under `cargo bench` (which passes
//! `--bench`; `cargo test --all-targets` merely checks they build), reporting a failure
//! as the exit code, and numbers from the environment.
use std::process::ExitCode;

use anyhow::Context as _;

/// Runs `run` under `cargo bench`, printing how to run it otherwise; its error fails the
/// process with the whole cause chain.
pub fn main(name: &str, run: impl FnOnce() -> anyhow::Result<()>) -> ExitCode {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("{name}: a benchmark; run it with `cargo bench -p workspace-tests --bench {name}`");
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{name} bench failed: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The number in environment variable `name`, or `default` when it is unset.
pub fn env_number(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(value) => value.parse().with_context(|| format!("{name} must be a number")),
        Err(_) => Ok(default),
    }
}
