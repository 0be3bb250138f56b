//! What the `api` binary writes to standard output: with `KFS_LOG_FORMAT=json` one JSON
//! object per line, carrying the fields of the spans around each event (the GraphQL
//! operation by name, never its variables); as text into a pipe, no colour codes.
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kfs_tests::process::{Binaries, Process, api_command};
use kfs_tests::server::TestServer;
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        json_logs_are_one_object_per_line_with_span_fields_and_no_variables,
        text_logs_into_a_pipe_carry_no_colour_codes,
        the_start_up_message_says_what_the_readme_says,
    ]
}

/// A variable value that must never reach the logs.
const SECRET: &str = "variable-value-not-for-logs";

/// Reads stdout lines for up to `within`, until `done` says the one wanted arrived.
async fn lines_until(
    process: &mut Process,
    within: Duration,
    done: impl Fn(&str) -> bool,
) -> anyhow::Result<Vec<String>> {
    let until = tokio::time::Instant::now() + within;
    let mut lines = Vec::new();
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let line = process
            .next_line(left)
            .await
            .with_context(|| format!("no wanted line within {within:?}; saw {lines:#?}"))?;
        let found = done(&line);
        lines.push(line);
        if found {
            return Ok(lines);
        }
    }
}

async fn json_logs_are_one_object_per_line_with_span_fields_and_no_variables(db: TestDb) -> anyhow::Result<()> {
    let binaries = Binaries::build().await?;
    let mut command = api_command(&binaries.api, &db.url);
    command.env("KFS_LOG_FORMAT", "json").env("RUST_LOG", "info,api=debug");
    let mut api = Process::spawn("api", command)?;
    let mut lines = lines_until(&mut api, Duration::from_secs(60), |line| line.contains("listening")).await?;
    let listening: Value = serde_json::from_str(lines.last().context("no line")?)?;
    let addr = listening["addr"].as_str().context("the listening event names no addr")?.to_owned();

    let token = TestServer::token("alice", "acme");
    let body = json!({ "query": "query Who($x: String) { viewer { subjectId } }", "operationName": "Who", "variables": { "x": SECRET } });
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/graphql"))
        .header("authorization", format!("Bearer {token}"))
        .json(&body)
        .send()
        .await?;
    ensure!(response.status().is_success(), "the request answered {}", response.status());
    lines.extend(lines_until(&mut api, Duration::from_secs(10), |line| line.contains("\"graphql operation\"")).await?);
    for line in &lines {
        let parsed: Value =
            serde_json::from_str(line).with_context(|| format!("a log line that is not JSON: {line}"))?;
        ensure!(parsed.is_object() && parsed["level"].is_string(), "not a log object: {line}");
        ensure!(!line.contains(SECRET), "a variable reached the log: {line}");
    }
    let operation = lines
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["span"]["name"] == "graphql operation")
        .context("no event in the operation's span")?;
    ensure!(operation["span"]["operation.name"] == "Who", "{operation}");
    Ok(())
}

async fn text_logs_into_a_pipe_carry_no_colour_codes(db: TestDb) -> anyhow::Result<()> {
    let binaries = Binaries::build().await?;
    let mut command = api_command(&binaries.api, &db.url);
    command.env("RUST_LOG", "info").env_remove("NO_COLOR");
    let mut api = Process::spawn("api", command)?;
    let lines = lines_until(&mut api, Duration::from_secs(60), |line| line.starts_with("GraphiQL:")).await?;
    ensure!(lines.iter().any(|line| line.contains("listening")), "no log line before the banner: {lines:#?}");
    ensure!(lines.iter().all(|line| !line.contains('\u{1b}')), "colour codes in piped logs: {lines:#?}");
    Ok(())
}

/// The README's "Start it" shows the message of the embedded default: GraphiQL with a
/// token for alice in acme, the SQLite file, the worker in-process, how to stop. With a
/// real secret (PostgreSQL refuses the development one) it says how to get a token.
async fn the_start_up_message_says_what_the_readme_says(db: TestDb) -> anyhow::Result<()> {
    let binaries = Binaries::build().await?;
    let mut command = api_command(&binaries.api, &db.url);
    command.env("KFS_EMBEDDED_WORKER", "true");
    if db.backend == kfs_tests::Backend::Sqlite {
        command.env_remove("KFS_JWT_SECRET");
    }
    let mut api = Process::spawn("api", command)?;
    let lines = lines_until(&mut api, Duration::from_secs(60), |line| line.starts_with("Stop:")).await?;
    let banner: Vec<&str> =
        lines.iter().map(String::as_str).skip_while(|line| !line.starts_with("GraphiQL:")).collect();
    let shows = |text: &str| banner.iter().any(|line| line.contains(text));
    ensure!(banner.first().is_some_and(|line| line.ends_with("/graphiql")), "{banner:#?}");
    ensure!(shows("Worker:    runs in this process") && shows("Stop:      Ctrl-C"), "{banner:#?}");
    if db.backend == kfs_tests::Backend::Sqlite {
        ensure!(shows("already carries a development token for subject `alice` in tenant `acme`"), "{banner:#?}");
        ensure!(shows("Database:  SQLite file"), "{banner:#?}");
    } else {
        ensure!(shows("cargo run -p api -- token --sub alice --tenant acme") && shows("Headers tab"), "{banner:#?}");
        ensure!(shows("Database:  PostgreSQL database") && !banner.concat().contains("postgres@"), "{banner:#?}");
    }
    Ok(())
}
