//! The OpenAI chat-completions stand-in ([`kfs_tests::openai_server`]) on a fixed port, so
//! the api and worker can be run by hand without a real model: every request gets
//! [`Reply::Auto`], which plans sub-queries and writes cited answers from the evidence.
//!
//! `cargo run -p workspace-tests --example openai_stand_in [-- --slow-ms N]` listens on
//! `127.0.0.1:$KFS_STAND_IN_PORT` (default 11435) until Ctrl-C; `--slow-ms N` pauses N ms
//! before each streamed delta, slow enough to watch an answer arrive in GraphiQL.
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use kfs_tests::openai_server::{OpenAiServer, Reply};

/// The port when `KFS_STAND_IN_PORT` is not set.
const DEFAULT_PORT: u16 = 11435;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let slow_ms = slow_ms(std::env::args().skip(1))?;
    let server = OpenAiServer::start_on(SocketAddr::from(([127, 0, 0, 1], port()?))).await?;
    server.always(Reply::Auto);
    server.auto_delay(Duration::from_millis(slow_ms));
    println!("OpenAI stand-in listening on {}", server.base_url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}

/// `KFS_STAND_IN_PORT`, or the default.
fn port() -> anyhow::Result<u16> {
    match std::env::var("KFS_STAND_IN_PORT") {
        Ok(port) => port.parse().with_context(|| format!("KFS_STAND_IN_PORT={port} is not a port")),
        Err(_) => Ok(DEFAULT_PORT),
    }
}

/// The `--slow-ms N` flag, 0 without it.
fn slow_ms(mut args: impl Iterator<Item = String>) -> anyhow::Result<u64> {
    let mut slow_ms = 0;
    while let Some(arg) = args.next() {
        anyhow::ensure!(arg == "--slow-ms", "unknown argument {arg:?}; usage: openai_stand_in [--slow-ms N]");
        let value = args.next().context("--slow-ms needs a number of milliseconds")?;
        slow_ms = value.parse().with_context(|| format!("--slow-ms {value} is not a number of milliseconds"))?;
    }
    Ok(slow_ms)
}
