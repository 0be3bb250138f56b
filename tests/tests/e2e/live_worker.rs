//! Live feeds of tasks a real worker runs: the partial results the pipeline commits, and
//! the progress of an embedded-worker run followed by the `graphql-ws` npm client that
//! frontends use.
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kfs_tests::ws::{Event, WsClient};
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::{Notify, Semaphore};
use worker::research::engine::{
    Answer, BuiltinEngine, EngineError, Passage, Plan, ResearchEngine, Retrieval, StageContext, Staged, async_trait,
};
use worker::runtime::{CancellationToken, TaskTracker};

use crate::api_support::{Api, CREATE_TASK, string_at};
use crate::http_contract::node_clients;
use crate::live_support::{PARTIALS, PROGRESS, api_with, assert_exactly, sequences};
use crate::worker_support::{DOCUMENTS, settings};

/// This module's tests, on both databases.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        partial_results_replay_what_the_worker_wrote_then_follow_the_rest_live_until_the_task_completes,
        the_graphql_ws_npm_client_gets_every_progress_event_of_an_embedded_worker_run_once,
    ]
}

/// How long a worker run may take before the test fails instead of hanging.
const RUN_DEADLINE: Duration = Duration::from_secs(30);

/// What the task reads: a task that runs, with real full-text evidence for its question.
const READ_TASK: &str = "query($id: UUID!) { researchTask(id: $id) { stage partialResults { sequence } \
    progressEvents { sequence } answerTrace { answer } } }";

/// A space of alice's holding [`DOCUMENTS`]; returns its id and alice's token.
async fn space_with_documents(api: &Api) -> anyhow::Result<(String, String)> {
    let token = api.token("alice");
    let space = api.space("alice").await?;
    for (title, content) in DOCUMENTS {
        let query = "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }";
        let input = json!({ "knowledgeSpaceId": space, "title": title, "content": content });
        api.data(Some(&token), query, json!({ "input": input })).await?;
    }
    Ok((space, token))
}

/// Creates a research task whose question the documents answer; returns its id.
async fn research_task(api: &Api, token: &str, space: &str) -> anyhow::Result<String> {
    let input = json!({
        "knowledgeSpaceId": space,
        "query": "How does a lease token fence a stale worker, and why use backoff with jitter?",
        "mode": "RESEARCH",
        "topK": 3,
        "budgetUsd": 1.0,
        // One round: one evidence bundle follows the retrievals.
        "limits": { "max_rounds": 1 },
    });
    let data = api.data(Some(token), CREATE_TASK, json!({ "input": input })).await?;
    string_at(&data, "/createResearchTask/id")
}

/// The built-in engine, held at the start of analysis until the test lets it go. By then
/// the retrieval checkpoint has committed its partial results; the evidence bundle, the
/// next stages and the completion are still to come. Only the timing is the test's: every
/// stage runs the real engine under the real lease loop.
struct HeldAtAnalysis {
    inner: BuiltinEngine,
    /// Notified when analysis is reached.
    reached: Arc<Notify>,
    /// One permit lets analysis run.
    gate: Arc<Semaphore>,
}

#[async_trait]
impl ResearchEngine for HeldAtAnalysis {
    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError> {
        self.inner.plan(ctx).await
    }

    async fn retrieve(&self, ctx: &StageContext<'_>, plan: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError> {
        self.inner.retrieve(ctx, plan).await
    }

    async fn analyze(&self, ctx: &StageContext<'_>, found: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError> {
        self.reached.notify_one();
        let _permit = self.gate.acquire().await.map_err(|_| EngineError::Transient("the gate closed".into()))?;
        self.inner.analyze(ctx, found).await
    }

    async fn generate(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Result<Staged<Answer>, EngineError> {
        self.inner.generate(ctx, evidence).await
    }
}

async fn partial_results_replay_what_the_worker_wrote_then_follow_the_rest_live_until_the_task_completes(
    db: TestDb,
) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    // The embedded worker's loops, on the server's pool and notifier, started here so the
    // test can hold the engine at one stage.
    let engine = Arc::new(HeldAtAnalysis {
        inner: BuiltinEngine::default(),
        reached: Arc::default(),
        gate: Arc::new(Semaphore::new(0)),
    });
    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    let state = &api.server.server.state;
    worker::runtime::spawn_with_engine(
        state.db.clone(),
        state.notifier.clone(),
        settings("live-worker"),
        engine.clone(),
        shutdown.clone(),
        &tracker,
    );

    let (space, token) = space_with_documents(&api).await?;
    let id = research_task(&api, &token, &space).await?;
    tokio::time::timeout(RUN_DEADLINE, engine.reached.notified()).await.context("the worker never reached analysis")?;
    let before = api.data(Some(&token), READ_TASK, json!({ "id": id })).await?;
    ensure!(before["researchTask"]["stage"] == "ANALYZING", "held at analysis, yet {before}");
    let retrieved = before["researchTask"]["partialResults"].as_array().map_or(0, Vec::len);
    let progressed = before["researchTask"]["progressEvents"].as_array().map_or(0, Vec::len);
    ensure!(retrieved >= 1, "retrieval committed no partial result: {before}");

    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    client.subscribe("partials", PARTIALS, json!({ "task": id, "after": 0 })).await?;
    client.subscribe("progress", PROGRESS, json!({ "task": id, "after": 0 })).await?;
    let mut replayed = receive(&mut client, &[("partials", retrieved), ("progress", progressed)]).await?;
    engine.gate.add_permits(1);
    let live = tokio::time::timeout(RUN_DEADLINE, client.collect_all(&["partials", "progress"]))
        .await
        .context("the run never completed")??;

    for (id, rest) in live {
        replayed.entry(id).or_default().extend(rest);
    }
    let partials = replayed.remove("partials").unwrap_or_default();
    let progress = replayed.remove("progress").unwrap_or_default();
    let after = api.data(Some(&token), READ_TASK, json!({ "id": id })).await?;
    ensure!(
        after["researchTask"]["stage"] == "COMPLETED" && after["researchTask"]["answerTrace"]["answer"].is_string(),
        "{after}"
    );
    let written = after["researchTask"]["partialResults"].as_array().map_or(0, Vec::len);
    ensure!(written == retrieved + 1, "analysis should add exactly the evidence bundle: {after}");
    assert_exactly("partial results", &sequences(&partials, "researchTaskPartialResults")?, 1, written as i64)?;
    let evidence = partials.last().and_then(|last| last.pointer("/data/researchTaskPartialResults/evidenceBundle"));
    ensure!(
        evidence.is_some_and(|bundle| bundle["kind"] == "evidence"
            && bundle["evidence"].as_array().is_some_and(|items| !items.is_empty())),
        "the live partial result should be a non-empty evidence bundle: {evidence:?}"
    );
    let events = after["researchTask"]["progressEvents"].as_array().map_or(0, Vec::len);
    assert_exactly("progress", &sequences(&progress, "researchTaskProgress")?, 1, events as i64)?;
    eprintln!(
        "live_worker ({}): {retrieved} partial results replayed, {} followed live; {progressed} progress events replayed, {} live",
        db.backend.name(),
        written - retrieved,
        events - progressed
    );

    client.close().await?;
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    api.stop().await;
    Ok(())
}

/// Reads until each operation delivered the given number of results; fails on anything
/// else (an error, a complete, the close).
async fn receive(client: &mut WsClient, wanted: &[(&str, usize)]) -> anyhow::Result<BTreeMap<String, Vec<Value>>> {
    let mut got: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let short =
        |got: &BTreeMap<String, Vec<Value>>| wanted.iter().any(|(id, count)| got.get(*id).map_or(0, Vec::len) < *count);
    while short(&got) {
        match client.next_event().await? {
            Event::Next(id, payload) if wanted.iter().any(|(wanted, _)| *wanted == id) => {
                got.entry(id).or_default().push(payload)
            }
            other => bail!("replaying {wanted:?} (have {got:?}): {other:?}"),
        }
    }
    Ok(got)
}

async fn the_graphql_ws_npm_client_gets_every_progress_event_of_an_embedded_worker_run_once(
    db: TestDb,
) -> anyhow::Result<()> {
    let dir = node_clients()?;
    let api = api_with(&db, |settings| settings.embedded_worker = true).await?;
    let (space, token) = space_with_documents(&api).await?;
    let id = research_task(&api, &token, &space).await?;
    // Subscribes while the worker runs: what it already wrote is replayed, the rest live.
    let mut node = tokio::process::Command::new("node")
        .arg(dir.join("node/graphql-ws-progress.mjs"))
        .args([api.server.ws_url().as_str(), token.as_str(), id.as_str(), "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("running node (is Node.js installed?)")?;
    let stdout = node.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut results = Vec::new();
    let completed = tokio::time::timeout(RUN_DEADLINE, async {
        while let Some(line) = lines.next_line().await? {
            let value: Value = serde_json::from_str(&line).with_context(|| format!("node printed {line}"))?;
            if value == json!({ "complete": true }) {
                return anyhow::Ok(true);
            }
            results.push(value);
        }
        Ok(false)
    })
    .await
    .context("the graphql-ws client did not finish in time")??;
    let output = node.wait_with_output().await?;
    ensure!(
        completed && output.status.success(),
        "the graphql-ws client failed ({}), after {results:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );

    let after = api.data(Some(&token), READ_TASK, json!({ "id": id })).await?;
    ensure!(after["researchTask"]["stage"] == "COMPLETED", "{after}");
    let events = after["researchTask"]["progressEvents"].as_array().map_or(0, Vec::len);
    assert_exactly("graphql-ws progress", &sequences(&results, "researchTaskProgress")?, 1, events as i64)?;
    let last = results.last().and_then(|result| result.pointer("/data/researchTaskProgress/stage"));
    ensure!(last == Some(&json!("COMPLETED")), "the feed should end with the completion, not {last:?}");
    api.stop().await;
    Ok(())
}
