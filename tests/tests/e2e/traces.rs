//! Trace export (`KFS_OTLP_ENDPOINT`) with the `api` and `worker` as separate processes,
//! both exporting to the tests' OTLP receiver: a task created by a request carrying a W3C
//! `traceparent` is run by the worker in spans of that same trace, under the request's
//! own span; a task created without one starts a trace of its own, which its run joins
//! too; and no exported span carries a task's query.
use std::time::Duration;

use anyhow::{Context as _, ensure};
use entity::MemberRole;
use kfs_tests::otlp_receiver::{OtlpReceiver, ReceivedSpan};
use kfs_tests::process::{ApiProcess, Binaries, Process, api_command, command, wait_until};
use kfs_tests::server::TestServer;
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use serde_json::{Value, json};

pub fn tests() -> Vec<DbTest> {
    db_tests![a_task_run_by_another_process_joins_the_trace_of_the_request_that_created_it]
}

/// The caller's trace and span, as a client that traces would send them.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";

const CREATE: &str = "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }";
const READ: &str = "query($id: UUID!) { researchTask(id: $id) { stage } }";
/// A query no span may carry (it would be task content in the trace store).
const TRACED_QUERY: &str = "Which fencing token does the traced-query-marker worker hold?";
const UNTRACED_QUERY: &str = "How does a lease token fence a stale worker?";

async fn a_task_run_by_another_process_joins_the_trace_of_the_request_that_created_it(
    db: TestDb,
) -> anyhow::Result<()> {
    let space = fixtures::space(&db).await?;
    let owner = fixtures::member(&db, &space, "owner", MemberRole::Owner).await?;
    for (title, content) in crate::worker_support::DOCUMENTS {
        fixtures::document(&db, &owner, title, content).await?;
    }
    let receiver = OtlpReceiver::start().await?;
    let binaries = Binaries::build().await?;
    let mut api = api_command(&binaries.api, &db.url);
    // The SDK's batch delay (default 5 s), shortened so the test need not wait for it.
    api.env("KFS_OTLP_ENDPOINT", receiver.base_url()).env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let api = ApiProcess::start(api).await?;
    let mut worker = command(&binaries.worker);
    worker
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .env("KFS_WORKER_POLL_INTERVAL_MS", "100")
        .env("KFS_OTLP_ENDPOINT", receiver.base_url())
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let mut worker = Process::spawn("worker", worker)?;

    let http = reqwest::Client::new();
    let token = TestServer::token("owner", &space.tenant_id);
    let create = async |query: &str, traceparent: Option<String>| -> anyhow::Result<String> {
        let input = json!({ "knowledgeSpaceId": space.id, "query": query, "mode": "FAST", "topK": 2 });
        let mut request = http.post(api.graphql_url()).bearer_auth(&token);
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        let body: Value =
            request.json(&json!({ "query": CREATE, "variables": { "input": input } })).send().await?.json().await?;
        body.pointer("/data/createResearchTask/id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .context(format!("{body}"))
    };
    let traced = create(TRACED_QUERY, Some(format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"))).await?;
    let untraced = create(UNTRACED_QUERY, None).await?;
    for task in [&traced, &untraced] {
        wait_until(Duration::from_secs(60), "the worker process to complete the task", async || {
            worker.ensure_running()?;
            let body: Value = http
                .post(api.graphql_url())
                .bearer_auth(&token)
                .json(&json!({ "query": READ, "variables": { "id": task } }))
                .send()
                .await?
                .json()
                .await?;
            Ok(body.pointer("/data/researchTask/stage") == Some(&json!("COMPLETED")))
        })
        .await?;
    }

    // Each process exports its spans within a batch delay of their end.
    let run_of = |spans: &[ReceivedSpan], task: &str| {
        spans.iter().find(|span| span.name == "task run" && span.attribute("task.id") == Some(task)).cloned()
    };
    wait_until(Duration::from_secs(30), "both task runs to be exported", async || {
        let spans = receiver.spans();
        Ok(run_of(&spans, &traced).is_some() && run_of(&spans, &untraced).is_some())
    })
    .await?;
    let spans = receiver.spans();
    let traced_run = run_of(&spans, &traced).context("the traced run")?;
    ensure_eq!(traced_run.service, "kfs-worker");
    ensure_eq!(traced_run.trace_id, TRACE_ID, "the run is in the creating request's trace");

    // The request's own span is the caller's child, in the api process, and the run hangs
    // off a span of that request (the `create task` call that stored the context).
    let request = spans
        .iter()
        .find(|span| span.name == "http request" && span.parent_span_id == CALLER_SPAN_ID)
        .context("no request span is the caller's child")?;
    ensure_eq!(request.service, "kfs-api");
    ensure_eq!(request.trace_id, TRACE_ID);
    let parent = spans
        .iter()
        .find(|span| span.span_id == traced_run.parent_span_id)
        .with_context(|| format!("the run's parent {} was not exported", traced_run.parent_span_id))?;
    ensure_eq!((parent.service.as_str(), parent.name.as_str()), ("kfs-api", "create task"));
    ensure_eq!(parent.trace_id, TRACE_ID);
    // The stages ran inside the run, so in the trace too.
    let inside = spans.iter().filter(|span| span.trace_id == TRACE_ID && span.service == "kfs-worker").count();
    ensure!(inside > 1, "only the run span itself joined the trace: {inside}");

    // Without a traceparent the request starts a trace, and the run joins that one.
    let untraced_run = run_of(&spans, &untraced).context("the untraced run")?;
    ensure!(untraced_run.trace_id != TRACE_ID, "an untraced request's task joined another trace");
    ensure!(
        spans.iter().any(|span| span.service == "kfs-api" && span.trace_id == untraced_run.trace_id),
        "the untraced task's run is not in the trace its creating request started"
    );

    // Spans name operations and ids, never what a task asks.
    for span in &spans {
        for (key, value) in &span.attributes {
            ensure!(
                !value.contains("traced-query-marker") && !value.contains(UNTRACED_QUERY),
                "span {:?} attribute {key} carries a task query: {value}",
                span.name
            );
        }
    }
    Ok(())
}
