//! How fast the release `api` binary refuses hostile documents, and how `/healthz` answers
//! while it does: `cargo bench -p workspace-tests --bench hostile`.
//!
//! The server runs in a process of its own on a temporary SQLite file (the guard that
//! refuses these documents touches no database) with the default 1 MiB body limit. Each
//! document of `kfs_tests::hostile::documents`, sized to fill the body, is sent
//! [`ROUNDS`] times one after the other; then four clients send the largest fragment
//! chains back to back for [`LOAD`] while a fifth times `/healthz` every 10 ms.
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kfs_tests::hostile::{documents, unused_fragment_chain};
use kfs_tests::process::{ApiProcess, api_command, build};
use serde_json::Value;

/// Sends of each document.
const ROUNDS: usize = 20;
/// How long the concurrent load runs.
const LOAD: Duration = Duration::from_secs(3);
/// The body every document is sized to fill: the server's default limit, less room for
/// the JSON around the document.
const BUDGET: usize = 1024 * 1024 - 4 * 1024;

fn main() -> ExitCode {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("hostile: run it with `cargo bench -p workspace-tests --bench hostile`");
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("hostile: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hostile: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Milliseconds of the `q`-quantile of `samples` (sorted here).
fn quantile(samples: &mut [Duration], q: f64) -> f64 {
    samples.sort_unstable();
    let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples.get(index).map_or(0.0, |sample| sample.as_secs_f64() * 1000.0)
}

async fn run() -> anyhow::Result<()> {
    let ([api], profile) = tokio::task::spawn_blocking(|| build(["api"])).await??;
    let file = std::env::temp_dir().join(format!("kfs-hostile-{}.sqlite", uuid::Uuid::new_v4().simple()));
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let mut command = api_command(&api, &url);
    command.env_remove("KFS_MAX_BODY_BYTES");
    let server = ApiProcess::start(command).await?;
    let http = reqwest::Client::new();
    let graphql = server.graphql_url();
    println!("hostile: the {profile} api binary, body limit 1 MiB, {ROUNDS} sends of each document");
    println!("{:<36} {:>9} {:>6} {:>14} {:>9} {:>9}", "document", "bytes", "status", "code", "p50 ms", "max ms");
    for document in documents(BUDGET, 100_000) {
        let body =
            format!("{{\"query\":{},\"variables\":{}}}", serde_json::to_string(&document.query)?, document.variables);
        let mut samples = Vec::with_capacity(ROUNDS);
        let mut answer = (0, String::new());
        for _ in 0..ROUNDS {
            let started = Instant::now();
            let response =
                http.post(&graphql).header("content-type", "application/json").body(body.clone()).send().await?;
            let status = response.status().as_u16();
            let reply: Value = response.json().await.unwrap_or(Value::Null);
            samples.push(started.elapsed());
            answer =
                (status, reply.pointer("/errors/0/extensions/code").and_then(Value::as_str).unwrap_or("-").to_owned());
        }
        let p50 = quantile(&mut samples, 0.5);
        let max = quantile(&mut samples, 1.0);
        println!("{:<36} {:>9} {:>6} {:>14} {:>9.2} {:>9.2}", document.what, body.len(), answer.0, answer.1, p50, max);
    }

    let chain = format!("{{\"query\":{}}}", serde_json::to_string(&unused_fragment_chain((BUDGET - 2_000) / 40))?);
    let until = Instant::now() + LOAD;
    let attackers: Vec<_> = (0..4)
        .map(|_| {
            let (http, url, body) = (http.clone(), graphql.clone(), chain.clone());
            tokio::spawn(async move {
                let mut sent = 0usize;
                while Instant::now() < until {
                    let response =
                        http.post(&url).header("content-type", "application/json").body(body.clone()).send().await?;
                    anyhow::ensure!(response.status().as_u16() < 500, "a chain answered {}", response.status());
                    sent += 1;
                }
                Ok(sent)
            })
        })
        .collect();
    let healthz = format!("http://{}/healthz", server.addr);
    let mut health = Vec::new();
    while Instant::now() < until {
        let started = Instant::now();
        http.get(&healthz).send().await.context("healthz")?;
        health.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut chains = 0;
    for attacker in attackers {
        chains += attacker.await??;
    }
    println!(
        "under load: {chains} 1 MiB fragment chains from 4 clients in {LOAD:?}; /healthz p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} probes",
        quantile(&mut health, 0.5),
        quantile(&mut health, 0.99),
        quantile(&mut health, 1.0),
        health.len()
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    drop(server);
    let _ = std::fs::remove_file(&file);
    Ok(())
}
