//! GraphiQL in headless Chromium (Debian's `chromium`, driven by `playwright-core`), with
//! every request to another host refused: the page loads from the binary alone and runs
//! the README's first task (a query, mutations with variables, a subscription that
//! streams to COMPLETED, the answer), asserting on what the page shows. On SQLite the
//! server runs as the embedded default (the development secret: the page carries the
//! token); on PostgreSQL with a real secret, the token goes into the Headers tab. Without
//! Chromium the trials are listed as ignored, with a banner. Screenshots are written to
//! `target/browser/<backend>/`, and the log names each.
use anyhow::{Context as _, ensure};
use api::config::DEVELOPMENT_JWT_SECRET;
use kfs_tests::openai_server::OpenAiServer;
use kfs_tests::server::TestServer;
use kfs_tests::{Backend, DbTest, TestDb, db_tests};
use secrecy::SecretString;
use serde_json::Value;

use crate::http_contract::node_clients;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        graphiql_runs_the_first_task_with_no_request_leaving_the_machine,
        graphiql_shows_a_models_answer_as_it_streams,
    ]
    .into_iter()
    .map(DbTest::needing_chromium)
    .collect()
}

/// Where the screenshots go: beside the build, so a CI run keeps them.
fn screenshot_dir(backend: Backend) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/browser").join(backend.name())
}

async fn graphiql_runs_the_first_task_with_no_request_leaving_the_machine(db: TestDb) -> anyhow::Result<()> {
    walkthrough(db, None).await
}

/// The README's walkthrough with `KFS_ENGINE=openai` against the stand-in model, which
/// writes slowly enough that GraphiQL's result pane shows the answer in parts.
async fn graphiql_shows_a_models_answer_as_it_streams(db: TestDb) -> anyhow::Result<()> {
    let model = OpenAiServer::start().await?;
    model.auto_delay(std::time::Duration::from_millis(200));
    walkthrough(db, Some(&model)).await
}

/// Runs the browser script against a server with the embedded worker (and the `openai`
/// engine on `model`, when given).
async fn walkthrough(db: TestDb, model: Option<&OpenAiServer>) -> anyhow::Result<()> {
    let dir = node_clients()?;
    let embedded = db.backend == Backend::Sqlite;
    let server = TestServer::start_with(&db.url, |settings| {
        settings.embedded_worker = true;
        if embedded {
            settings.jwt_secret = SecretString::from(DEVELOPMENT_JWT_SECRET);
        }
        if let Some(model) = model {
            settings.worker.engine.kind = worker::config::EngineKind::Openai;
            settings.worker.openai = crate::research_openai::openai_settings(model);
            model.require_key(crate::research_openai::KEY);
        }
    })
    .await?;
    let mut shots = screenshot_dir(db.backend);
    if model.is_some() {
        shots = shots.join("answer");
    }
    let mut command = tokio::process::Command::new("node");
    command.arg(dir.join("node/graphiql-browser.mjs")).arg(server.server.base_url()).arg(&shots);
    if !embedded {
        command.arg(TestServer::token("alice", "acme"));
    }
    if model.is_some() {
        command.env("KFS_BROWSER_SCENARIO", "answer");
    }
    command.env("KFS_CHROMIUM", kfs_tests::harness::chromium());
    let output = command.output().await.context("running the browser script (is Node.js installed?)")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = stdout.lines().rev().find_map(|line| serde_json::from_str(line).ok()).with_context(|| {
        format!("no report from the browser script: {stdout}{}", String::from_utf8_lossy(&output.stderr))
    })?;
    for shot in report["screenshots"].as_array().into_iter().flatten() {
        eprintln!("graphiql_browser ({}): screenshot {}", db.backend.name(), shot.as_str().unwrap_or_default());
    }
    ensure!(report["blocked"] == Value::Array(vec![]), "the page asked other hosts for {}", report["blocked"]);
    ensure!(report["errors"] == Value::Array(vec![]), "the page reported errors: {}", report["errors"]);
    ensure!(report["ok"] == true, "the browser run failed: {report}");
    let host = server.server.addr.to_string();
    let sockets = report["sockets"].as_array().context("no sockets list")?;
    ensure!(
        !sockets.is_empty() && sockets.iter().all(|url| url.as_str().is_some_and(|url| url.contains(&host))),
        "the subscription did not run over this server's WebSocket: {sockets:?}"
    );
    server.stop().await;
    Ok(())
}
