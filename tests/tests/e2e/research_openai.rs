//! Research through the `openai` engine against the stand-in chat endpoint
//! (`kfs_tests::openai_server`), which speaks OpenAI's wire format: a plan read from JSON,
//! evidence from passages, a cited answer streamed; `cost` exactly the usage at the
//! configured prices; budgets checked before every call; transient failures retried,
//! refusals not; a cancel that drops the request in flight; the API key in no log or error.
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use entity::{Stage, research_task_job as job, research_task_progress_event as progress};
use kfs_tests::openai_server::{Answer, OpenAiServer, Reply, Seen, Usage};
use kfs_tests::process::{ApiProcess, Binaries, api_command, wait_until};
use kfs_tests::server::{GraphqlClient, TestServer};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use secrecy::SecretString;
use serde_json::{Value, json};
use uuid::Uuid;
use worker::config::{EngineKind, OpenAiSettings};

use crate::api_support::{Api, string_at};
use crate::knowledge_documents::add;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_task_plans_retrieves_and_answers_with_the_model_and_costs_exactly_its_usage,
        a_call_that_could_pass_the_budget_is_never_made,
        rate_limits_and_server_errors_are_retried_and_refusals_are_not,
        a_providers_words_reach_no_row_event_metric_or_page,
        a_stream_cut_mid_answer_is_retried_not_stored,
        malformed_streams_and_timeouts_are_retried_and_plain_json_replies_are_read,
        an_unusable_plan_falls_back_and_a_server_without_json_mode_is_asked_in_words,
        citations_of_missing_evidence_and_unsupported_claims_are_removed_and_missing_usage_is_estimated,
        weak_answers_are_attributed_or_replaced_by_the_extractive_answer,
        a_deep_task_decides_its_rounds_with_the_model_and_verifies_each_cited_claim,
        an_answer_without_prose_is_repaired_once_when_the_budget_allows,
        cancel_drops_the_request_in_flight,
        a_lease_lost_to_expiry_drops_the_request_at_the_next_heartbeat,
        the_api_key_reaches_no_log_and_no_error,
        an_incomplete_openai_configuration_refuses_to_start,
        each_mode_uses_its_own_model,
    ]
    .into_iter()
    .chain(db_tests![a_real_model_answers_a_task].into_iter().map(DbTest::needing_real_model))
    .collect()
}

/// A model whose tokenizer tiktoken knows, so prompts are counted exactly.
pub const MODEL: &str = "gpt-4o-mini";
/// The key the stand-in requires; it must never be printed.
pub const KEY: &str = "sk-kfs-test-4f1c9e2b7d";
/// Prices, dollars per million tokens.
const INPUT_PRICE: f64 = 2.5;
const OUTPUT_PRICE: f64 = 10.0;

/// The engine's settings for the stand-in.
pub fn openai_settings(server: &OpenAiServer) -> OpenAiSettings {
    OpenAiSettings {
        base_url: Some(server.base_url()),
        api_key: Some(SecretString::from(KEY)),
        model: Some(MODEL.to_owned()),
        timeout_ms: 10_000,
        max_output_tokens: 400,
        input_usd_per_1m: Some(INPUT_PRICE),
        output_usd_per_1m: Some(OUTPUT_PRICE),
        max_retries: 3,
        ..OpenAiSettings::default()
    }
}

/// A server whose embedded worker runs the `openai` engine against `server`.
pub async fn api(db: &TestDb, server: &OpenAiServer, tweak: impl FnOnce(&mut OpenAiSettings)) -> anyhow::Result<Api> {
    server.require_key(KEY);
    let mut openai = openai_settings(server);
    tweak(&mut openai);
    crate::live_support::api_with(db, |settings| {
        settings.embedded_worker = true;
        settings.worker.engine.kind = EngineKind::Openai;
        settings.worker.openai = openai;
        settings.worker.retry_base_ms = 50;
        settings.worker.retry_cap_ms = 200;
        settings.worker.poll_interval_ms = 100;
        settings.worker.answer_draft_ms = 50;
    })
    .await
}

/// Documents about bees, so retrieval finds passages to cite.
pub const DOCUMENTS: &[(&str, &str)] = &[
    (
        "Honey",
        "Bees make honey from nectar. Worker bees add enzymes to the nectar and fan it with their wings until it thickens.",
    ),
    ("Wax", "Bees store honey in wax combs. The wax comes from glands on the worker bees' abdomens."),
    ("Tides", "Tides are caused by the pull of the moon and the sun on the oceans."),
];

/// A space with [`DOCUMENTS`], owned by alice; returns the space and alice's token.
pub async fn space_with_documents(api: &Api) -> anyhow::Result<(String, String)> {
    let space = api.space("alice").await?;
    let token = api.token("alice");
    for (title, content) in DOCUMENTS {
        add(api, &token, &space, title, content, "TEXT_PLAIN").await?;
    }
    Ok((space, token))
}

/// Creates a task; `extra` adds input fields (mode, budget…).
pub async fn create(api: &Api, token: &str, space: &str, query: &str, extra: Value) -> anyhow::Result<String> {
    let mut input = json!({ "knowledgeSpaceId": space, "query": query });
    if let (Some(input), Some(extra)) = (input.as_object_mut(), extra.as_object()) {
        input.extend(extra.clone());
    }
    let mutation = "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }";
    string_at(&api.data(Some(token), mutation, json!({ "input": input })).await?, "/createResearchTask/id")
}

/// Waits until the task is terminal and returns its row.
pub async fn wait_terminal(db: &TestDb, task: &str) -> anyhow::Result<job::Model> {
    let id: Uuid = task.parse()?;
    wait_until(Duration::from_secs(60), "the task to end", async || {
        Ok(job::Entity::find_by_id(id).one(&db.db).await?.is_some_and(|row| row.stage.is_terminal()))
    })
    .await?;
    job::Entity::find_by_id(id).one(&db.db).await?.context("the task vanished")
}

/// The task's answer and evidence, as a client reads them.
pub async fn trace(api: &Api, token: &str, task: &str) -> anyhow::Result<Value> {
    let read =
        "query($id: UUID!) { researchTask(id: $id) { stage error answerTrace { answer evidence citationChecks } } }";
    Ok(api.data(Some(token), read, json!({ "id": task })).await?["researchTask"].clone())
}

/// The task's progress event with this idempotency key (`stage:retrieving` carries the plan).
async fn event(db: &TestDb, task: Uuid, key: &str) -> anyhow::Result<progress::Model> {
    progress::Entity::find()
        .filter(progress::Column::ResearchTaskJobId.eq(task))
        .filter(progress::Column::IdempotencyKey.eq(key))
        .one(&db.db)
        .await?
        .with_context(|| format!("no {key} event"))
}

/// What the usage a request reported costs, in nanodollars, rounded per call as the
/// engine does.
fn nanos(seen: &Seen) -> i64 {
    nanos_at(seen, INPUT_PRICE, OUTPUT_PRICE)
}

async fn a_task_plans_retrieves_and_answers_with_the_model_and_costs_exactly_its_usage(
    db: TestDb,
) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let question = "How do bees make honey and where do they store it?";
    let task = create(&api, &token, &space, question, json!({ "mode": "RESEARCH", "budgetUsd": 1.0 })).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "error: {:?}", row.error);

    let seen = server.seen();
    // RESEARCH runs up to two rounds: after the first, the model is asked whether the
    // evidence answers the question (the stand-in says it does once anything was found).
    ensure_eq!(seen.len(), 3, "a planning call, a decision, a generation call: {seen:#?}");
    let (plan_call, decision_call, answer_call) = (&seen[0], &seen[1], &seen[2]);
    ensure_eq!(decision_call.body["response_format"]["type"], json!("json_object"));
    let round = event(&db, row.id, "stage:generating").await?;
    ensure_eq!(
        (&round.payload["round"], &round.payload["decision"], &round.payload["engine"]["decision"]["decider"]),
        (&json!(1), &json!("answered"), &json!("model")),
        "{}",
        round.payload
    );
    for call in &seen {
        ensure_eq!(call.authorization.as_deref(), Some(format!("Bearer {KEY}").as_str()));
        ensure_eq!(call.body["model"], json!(MODEL));
        ensure_eq!(call.body["stream"], json!(true));
        ensure_eq!(call.body["stream_options"]["include_usage"], json!(true));
    }
    ensure_eq!(plan_call.body["max_tokens"], json!(400));
    ensure_eq!(answer_call.body["max_tokens"], json!(400));
    ensure_eq!(decision_call.body["max_tokens"], json!(256), "a decision is a short JSON object");
    ensure_eq!(plan_call.body["response_format"]["type"], json!("json_object"));

    // The plan is the model's: the question first, then what it proposed.
    let event = event(&db, row.id, "stage:retrieving").await?;
    ensure_eq!(event.payload["engine"]["planner"], json!("model"), "{}", event.payload);
    let proposed: Value = serde_json::from_str(plan_call.content.as_deref().context("no plan content")?)?;
    let mut expected = vec![json!(question)];
    expected
        .extend(proposed["sub_queries"].as_array().cloned().unwrap_or_default().into_iter().filter(|q| q != question));
    expected.truncate(3);
    ensure_eq!(event.payload["plan"]["sub_queries"], json!(expected));

    // The answer is what the model wrote (its citations valid), over passages it cites.
    let trace = trace(&api, &token, &task).await?;
    let answer = trace["answerTrace"]["answer"].as_str().context("no answer")?;
    ensure_eq!(
        Some(answer),
        answer_call.content.as_deref().map(str::trim),
        "the stand-in cited only evidence that exists"
    );
    let evidence = trace["answerTrace"]["evidence"].as_array().context("no evidence")?;
    ensure!(!evidence.is_empty() && answer.contains("[1]"), "{trace}");
    for (index, item) in evidence.iter().enumerate() {
        ensure_eq!(item["citation"], json!(index + 1));
        ensure!(item["passage_id"].is_string() && item["char_end"].as_i64() > item["char_start"].as_i64(), "{item}");
        ensure!(answer.contains(&format!("[{}]", index + 1)), "evidence [{}] is cited: {answer}", index + 1);
    }
    ensure!(
        answer_call.body["messages"][1]["content"].as_str().is_some_and(|prompt| prompt.contains("[1] ")),
        "numbered evidence"
    );

    // Cost: exactly the usage at the prices, per stage and per call.
    let cost = &row.cost;
    let (plan_nanos, decision_nanos, answer_nanos) = (nanos(plan_call), nanos(decision_call), nanos(answer_call));
    ensure_eq!(cost["usd_nanos"], json!(plan_nanos + decision_nanos + answer_nanos), "{cost}");
    let usage = |seen: &Seen| seen.usage.expect("usage");
    let sum = |tokens: fn(Usage) -> i64| seen.iter().map(|call| tokens(usage(call))).sum::<i64>();
    ensure_eq!(cost["input_tokens"], json!(sum(|usage| usage.prompt_tokens)));
    ensure_eq!(cost["output_tokens"], json!(sum(|usage| usage.completion_tokens)));
    ensure_eq!(cost["stages"]["planning"]["usd_nanos"], json!(plan_nanos));
    ensure_eq!(cost["stages"]["analyzing"]["usd_nanos"], json!(decision_nanos));
    ensure_eq!(cost["stages"]["generating"]["usd_nanos"], json!(answer_nanos));
    ensure_eq!(cost["stages"]["retrieving"]["usd_nanos"], json!(0), "retrieval calls no model");
    let calls = cost["stages"]["generating"]["calls"].as_array().context("per-call detail")?;
    ensure_eq!(calls.len(), 1);
    ensure_eq!(calls[0]["model"], json!(MODEL));
    ensure!(calls[0].get("estimated").is_none(), "usage came from the server: {}", calls[0]);
    ensure!(row.budget_usd.is_some_and(|budget| (plan_nanos + decision_nanos + answer_nanos) as f64 / 1e9 < budget));
    api.stop().await;
    Ok(())
}

async fn a_call_that_could_pass_the_budget_is_never_made(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    // Prompts free and outputs $10 per million: every call's worst case is exactly its
    // 1,000 output tokens, $0.01, whatever its prompt.
    let api = api(&db, &server, |openai| {
        openai.input_usd_per_1m = Some(0.0);
        openai.max_output_tokens = 1_000;
    })
    .await?;
    let (space, token) = space_with_documents(&api).await?;
    let research = json!({ "mode": "RESEARCH" });
    let with_budget = |budget: f64| {
        let mut extra = research.clone();
        extra["budgetUsd"] = json!(budget);
        extra
    };

    // Not even the first call fits: nothing is sent.
    let task = create(&api, &token, &space, "How do bees make honey?", with_budget(0.009)).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Failed);
    let error = row.error.clone().unwrap_or_default();
    ensure!(error.contains("budget exceeded") && error.contains("planning"), "{error}");
    ensure!(server.seen().is_empty(), "the server received {:#?}", server.seen());
    ensure_eq!(row.execution_attempts, 1, "a budget error is not retried");

    // Planning fits ($0.01 of $0.0101); what it spends leaves less than generation's $0.01.
    let task = create(&api, &token, &space, "How do bees make honey?", with_budget(0.0101)).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Failed);
    let error = row.error.clone().unwrap_or_default();
    ensure!(error.contains("budget exceeded") && error.contains("generating"), "{error}");
    ensure_eq!(server.seen().len(), 1, "only the planning call was made");
    ensure_eq!(row.cost["usd_nanos"], json!(nanos_at(&server.seen()[0], 0.0, 10.0)));

    // A budget that fits completes, under it.
    let task = create(&api, &token, &space, "How do bees make honey?", with_budget(0.05)).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    ensure!(row.cost["usd"].as_f64().is_some_and(|spent| spent > 0.0 && spent <= 0.05), "{}", row.cost);
    api.stop().await;
    Ok(())
}

fn nanos_at(seen: &Seen, input: f64, output: f64) -> i64 {
    let usage = seen.usage.expect("usage");
    ((usage.prompt_tokens as f64 * input / 1e6 + usage.completion_tokens as f64 * output / 1e6) * 1e9).round() as i64
}

async fn rate_limits_and_server_errors_are_retried_and_refusals_are_not(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let fast = json!({ "mode": "FAST" });

    // 429 with Retry-After: waited out, then success (FAST plans without a call).
    server.then([Reply::rate_limited(1)]);
    let task = create(&api, &token, &space, "How do bees make honey?", fast.clone()).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    let seen = server.seen();
    ensure_eq!(seen.len(), 2, "{seen:#?}");
    ensure!(seen[1].at.duration_since(seen[0].at) >= Duration::from_secs(1), "Retry-After honoured");
    ensure_eq!(row.execution_attempts, 1, "retried within the attempt");

    // 500 twice, then success.
    server.then([Reply::server_error(), Reply::server_error()]);
    let task = create(&api, &token, &space, "Where do bees store honey?", fast.clone()).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    ensure_eq!(server.seen().len(), 5);

    // 401: the task fails at once, with a fixed description of the refusal.
    server.then([Reply::error(401, "Incorrect API key provided.", "invalid_request_error", Some("invalid_api_key"))]);
    let task = create(&api, &token, &space, "What is wax made of?", fast).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Failed);
    ensure_eq!(server.seen().len(), 6, "no retry after a refusal");
    ensure_eq!(row.execution_attempts, 1, "no second attempt either");
    let error = row.error.unwrap_or_default();
    ensure!(error.contains("HTTP 401") && error.contains("code invalid_api_key"), "{error}");
    ensure!(!error.contains("Incorrect API key provided"), "the provider's words are not kept: {error}");
    api.stop().await;
    Ok(())
}

async fn a_stream_cut_mid_answer_is_retried_not_stored(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let cut = "A truncated answer that must never be stored [1] because";
    server.then([Reply::Cut { content: cut.to_owned(), after_chars: 30 }]);
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST" })).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    let seen = server.seen();
    ensure_eq!(seen.len(), 2, "the cut call and its retry: {seen:#?}");
    ensure!(!seen[0].finished, "the first response was cut");
    let answer = trace(&api, &token, &task).await?["answerTrace"]["answer"].as_str().unwrap_or_default().to_owned();
    ensure_eq!(Some(answer.as_str()), seen[1].content.as_deref().map(str::trim));
    ensure!(!answer.contains("truncated"), "{answer}");
    // What the cut call streamed is counted, as an estimate.
    let calls = row.cost["stages"]["generating"]["calls"].as_array().cloned().unwrap_or_default();
    ensure_eq!(calls.len(), 2, "{}", row.cost);
    ensure_eq!(calls[0]["status"], json!("cut"));
    ensure_eq!(calls[0]["estimated"], json!(true));
    api.stop().await;
    Ok(())
}

async fn cancel_drops_the_request_in_flight(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let long = "Bees make honey from nectar [1]. ".repeat(40);
    server.then([Reply::Answer(Answer::new(long).slow(Duration::from_millis(100)))]);
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST" })).await?;
    wait_until(Duration::from_secs(30), "the answer to be streaming", async || {
        Ok(server.seen().first().is_some_and(|seen| seen.content.is_some()))
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let canceled_at = Instant::now();
    let cancel = "mutation($id: UUID!) { cancelResearchTask(id: $id) { stage } }";
    let data = api.data(Some(&token), cancel, json!({ "id": task })).await?;
    ensure_eq!(data["cancelResearchTask"]["stage"], json!("CANCELED"));
    wait_until(Duration::from_secs(5), "the request to be dropped", async || Ok(server.seen()[0].dropped_at.is_some()))
        .await?;
    let dropped = server.seen()[0].dropped_at.context("dropped")?.duration_since(canceled_at);
    println!("cancel: the in-flight request was dropped {} ms after the cancel was sent", dropped.as_millis());
    ensure!(dropped < Duration::from_millis(200), "dropped after {dropped:?}");
    ensure!(!server.seen()[0].finished);
    // Nothing is written after: no trace, the task stays canceled.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let read = trace(&api, &token, &task).await?;
    ensure_eq!(read["stage"], json!("CANCELED"));
    ensure!(read["answerTrace"].is_null(), "{read}");
    ensure_eq!(server.seen().len(), 1, "no further call");
    api.stop().await;
    Ok(())
}

async fn a_lease_lost_to_expiry_drops_the_request_at_the_next_heartbeat(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    server.require_key(KEY);
    let mut openai = openai_settings(&server);
    openai.max_retries = 0;
    let api = crate::live_support::api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.engine.kind = EngineKind::Openai;
        settings.worker.openai = openai;
        settings.worker.heartbeat_ms = 200;
        settings.worker.poll_interval_ms = 60_000;
    })
    .await?;
    let (space, token) = space_with_documents(&api).await?;
    let long = "Bees make honey from nectar [1]. ".repeat(60);
    server.then([Reply::Answer(Answer::new(long).slow(Duration::from_millis(100)))]);
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST" })).await?;
    wait_until(Duration::from_secs(30), "the answer to be streaming", async || {
        Ok(server.seen().first().is_some_and(|seen| seen.content.is_some()))
    })
    .await?;
    // Another worker takes the task over as if the lease had expired (its clock is past
    // the expiry), through a notifier of its own: on SQLite only the first worker's next
    // heartbeat can tell it (on PostgreSQL the claim's NOTIFY may tell it sooner).
    // A claim skips rows locked at that instant (SKIP LOCKED), and the first worker locks
    // the row for each draft write and lease renewal: try again until it is free.
    let later = entity::now_millis() + 10 * 60_000;
    let mut stolen = Vec::new();
    wait_until(Duration::from_secs(5), "the thief to take the lease over", async || {
        stolen = worker::lifecycle::claim_due(&db.db, &worker::Notifier::new(), "thief", 60_000, 1, later).await?;
        Ok(!stolen.is_empty())
    })
    .await?;
    ensure_eq!(stolen.len(), 1, "the lease was taken over");
    let taken_at = Instant::now();
    wait_until(Duration::from_secs(5), "the first worker to drop its request", async || {
        Ok(server.seen()[0].dropped_at.is_some())
    })
    .await?;
    let dropped = server.seen()[0].dropped_at.context("dropped")?.duration_since(taken_at);
    ensure!(dropped < Duration::from_millis(200 + 300), "dropped {dropped:?} after the takeover, by the next beat");
    // Nothing of the first worker lands: the task is the thief's, and no trace was written.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let row = job::Entity::find_by_id(task.parse::<Uuid>()?).one(&db.db).await?.context("task")?;
    ensure_eq!(row.worker_id.as_deref(), Some("thief"));
    ensure!(trace(&api, &token, &task).await?["answerTrace"].is_null());
    api.stop().await;
    Ok(())
}

async fn the_api_key_reaches_no_log_and_no_error(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    server.require_key(KEY);
    // A 500 (retried, logged as a warning), then a 401 whose message echoes the key.
    server.then([
        Reply::server_error(),
        Reply::error(
            401,
            &format!("Incorrect API key provided: {KEY}."),
            "invalid_request_error",
            Some("invalid_api_key"),
        ),
    ]);
    let binaries = Binaries::build().await?;
    let mut command = api_command(&binaries.api, &db.url);
    command
        .env("KFS_EMBEDDED_WORKER", "true")
        .env("RUST_LOG", "debug")
        .env("KFS_ENGINE", "openai")
        .env("KFS_OPENAI_BASE_URL", server.base_url())
        .env("KFS_OPENAI_API_KEY", KEY)
        .env("KFS_OPENAI_MODEL", MODEL)
        .env("KFS_OPENAI_INPUT_USD_PER_1M", "0")
        .env("KFS_OPENAI_OUTPUT_USD_PER_1M", "0")
        .env("KFS_WORKER_POLL_INTERVAL_MS", "100");
    let mut process = ApiProcess::start(command).await?;
    let tenant = format!("tenant-{}", Uuid::new_v4().simple());
    let client = GraphqlClient::new(process.graphql_url(), TestServer::token("alice", &tenant));
    let space = client.run("mutation { createKnowledgeSpace(input: {name: \"Bees\"}) { id } }", json!({})).await?;
    let space = string_at(&space, "/createKnowledgeSpace/id")?;
    let add = "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }";
    let input = json!({ "knowledgeSpaceId": space, "title": "Honey", "content": DOCUMENTS[0].1 });
    client.run(add, json!({ "input": input })).await?;
    let create = "mutation($s: UUID!) { createResearchTask(input: {knowledgeSpaceId: $s, query: \"How do bees make honey?\", mode: FAST}) { id } }";
    let task = string_at(&client.run(create, json!({ "s": space })).await?, "/createResearchTask/id")?;
    let read = "query($id: UUID!) { researchTask(id: $id) { stage error } }";
    let mut lines = Vec::new();
    wait_until(Duration::from_secs(60), "the task to fail", async || {
        while let Some(line) = process.process.next_line(Duration::from_millis(10)).await {
            lines.push(line);
        }
        Ok(client.run(read, json!({ "id": task })).await?["researchTask"]["stage"] == "FAILED")
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Some(line) = process.process.next_line(Duration::from_millis(50)).await {
        lines.push(line);
    }
    let error =
        client.run(read, json!({ "id": task })).await?["researchTask"]["error"].as_str().unwrap_or_default().to_owned();
    ensure!(
        error.contains("HTTP 401") && !error.contains("Incorrect"),
        "a fixed description, never the provider's words: {error}"
    );
    ensure!(!error.contains(KEY), "the key in the task's error: {error}");
    ensure!(lines.iter().any(|line| line.contains("model call failed")), "the retry was logged: {lines:#?}");
    ensure!(lines.len() > 20, "debug logs were captured: {}", lines.len());
    let leaked: Vec<&String> = lines.iter().filter(|line| line.contains(KEY)).collect();
    ensure!(leaked.is_empty() && !process.process.tail().contains(KEY), "the key reached the log: {leaked:#?}");
    ensure_eq!(server.seen().len(), 2);
    Ok(())
}

async fn an_incomplete_openai_configuration_refuses_to_start(db: TestDb) -> anyhow::Result<()> {
    let binaries = Binaries::build().await?;
    for binary in [&binaries.api, &binaries.worker] {
        let mut command = if binary == &binaries.api {
            let mut command = api_command(binary, &db.url);
            command.env("KFS_EMBEDDED_WORKER", "true");
            command
        } else {
            let mut command = kfs_tests::process::command(binary);
            command.env("DATABASE_URL", &db.url);
            command
        };
        command
            .env("KFS_ENGINE", "openai")
            .env("KFS_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
            .env("KFS_OPENAI_API_KEY", KEY);
        let output = tokio::time::timeout(Duration::from_secs(60), tokio::process::Command::from(command).output())
            .await
            .context("the binary did not exit")??;
        ensure!(!output.status.success(), "{} started without a model", binary.display());
        let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        for missing in ["KFS_OPENAI_MODEL", "KFS_OPENAI_INPUT_USD_PER_1M", "KFS_OPENAI_OUTPUT_USD_PER_1M"] {
            ensure!(printed.contains(missing), "{} does not name {missing}: {printed}", binary.display());
        }
        ensure!(!printed.contains(KEY), "the key was printed: {printed}");
    }
    Ok(())
}

/// With `KFS_TEST_OPENAI_BASE_URL` (and model, key) set: one task through a real model.
async fn a_real_model_answers_a_task(db: TestDb) -> anyhow::Result<()> {
    let (base_url, model, key) = kfs_tests::harness::real_model().context("no real model configured")?;
    let api = crate::live_support::api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.engine.kind = EngineKind::Openai;
        settings.worker.openai = OpenAiSettings {
            base_url: Some(base_url),
            api_key: key.map(SecretString::from),
            model: Some(model),
            max_output_tokens: 300,
            input_usd_per_1m: Some(0.0),
            output_usd_per_1m: Some(0.0),
            ..OpenAiSettings::default()
        };
    })
    .await?;
    let (space, token) = space_with_documents(&api).await?;
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "RESEARCH" })).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    let trace = trace(&api, &token, &task).await?;
    let answer = trace["answerTrace"]["answer"].as_str().unwrap_or_default();
    println!("real model answered: {answer}");
    ensure!(!answer.trim().is_empty(), "{trace}");
    ensure!(row.cost["output_tokens"].as_i64().is_some_and(|tokens| tokens > 0), "{}", row.cost);
    api.stop().await;
    Ok(())
}

async fn malformed_streams_and_timeouts_are_retried_and_plain_json_replies_are_read(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |openai| openai.timeout_ms = 1_000).await?;
    let (space, token) = space_with_documents(&api).await?;
    let fast = json!({ "mode": "FAST" });
    let garbled = Reply::Raw {
        content_type: "text/event-stream".into(),
        body: "data: {\"choices\": [{\"delta\": {\"content\": \"Bees\"}}]}\n\ndata: {not json\n\n".into(),
    };
    // Garbled, then too slow for the 1 s timeout, then a server that ignores `stream`.
    let slow = Reply::Answer(Answer::new("Far too slow an answer [1].").chunked(2).slow(Duration::from_millis(300)));
    let whole = Reply::Raw {
        content_type: "application/json".into(),
        body: json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": MODEL,
            "choices": [{ "index": 0, "message": { "role": "assistant", "content": "Bees make honey from nectar [1]." }, "finish_reason": "stop" }],
            "usage": { "prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129 }
        })
        .to_string(),
    };
    server.then([garbled, slow, whole]);
    let task = create(&api, &token, &space, "How do bees make honey?", fast).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    let seen = server.seen();
    ensure_eq!(seen.len(), 3, "{seen:#?}");
    ensure!(seen[1].dropped_at.is_some() && !seen[1].finished, "the slow call was given up");
    let answer = trace(&api, &token, &task).await?["answerTrace"]["answer"].as_str().unwrap_or_default().to_owned();
    ensure_eq!(answer, "Bees make honey from nectar [1].");
    // The two broken calls streamed something, so they count (estimated); the last one
    // costs what its usage says.
    let calls = row.cost["stages"]["generating"]["calls"].as_array().cloned().unwrap_or_default();
    let statuses: Vec<&Value> = calls.iter().map(|call| &call["status"]).collect();
    ensure_eq!(statuses, [&json!("cut"), &json!("cut"), &json!("ok")], "{}", row.cost);
    ensure_eq!((calls[2]["input_tokens"].clone(), calls[2]["output_tokens"].clone()), (json!(120), json!(9)));
    ensure!(calls[..2].iter().all(|call| call["estimated"] == json!(true)));
    let summed: i64 = calls.iter().filter_map(|call| call["usd_nanos"].as_i64()).sum();
    ensure_eq!(row.cost["usd_nanos"], json!(summed));
    api.stop().await;
    Ok(())
}

async fn an_unusable_plan_falls_back_and_a_server_without_json_mode_is_asked_in_words(
    db: TestDb,
) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let research = json!({ "mode": "RESEARCH" });
    let question = "How do bees make honey, and where do they store it?";
    let plan_of = async |task: &str| -> anyhow::Result<Value> {
        Ok(event(&db, task.parse()?, "stage:retrieving").await?.payload)
    };

    server.then([Reply::answer("I would rather not plan anything today.")]);
    let task = create(&api, &token, &space, question, research.clone()).await?;
    ensure_eq!(wait_terminal(&db, &task).await?.stage, Stage::Completed);
    let payload = plan_of(&task).await?;
    ensure_eq!(payload["engine"]["planner"], json!("builtin"), "{payload}");
    ensure!(payload["engine"]["fallback"].is_string(), "{payload}");
    ensure_eq!(payload["plan"]["sub_queries"][0], json!(question));

    let refused = "Invalid parameter: 'response_format' of type 'json_object' is not supported with this model.";
    server.then([Reply::error(400, refused, "invalid_request_error", None)]);
    let before = server.seen().len();
    let task = create(&api, &token, &space, question, research).await?;
    ensure_eq!(wait_terminal(&db, &task).await?.stage, Stage::Completed);
    let seen = server.seen();
    ensure!(seen[before].body.get("response_format").is_some(), "asked for JSON first");
    ensure!(seen[before + 1].body.get("response_format").is_none(), "then in words: {:?}", seen[before + 1].body);
    ensure_eq!(plan_of(&task).await?["engine"]["planner"], json!("model"), "the prose reply's JSON was read");

    // A reasoning model's dialect: `max_completion_tokens`, no `temperature`.
    server.then([
        Reply::error(
            400,
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "invalid_request_error",
            Some("unsupported_parameter"),
        ),
        Reply::error(400, "Unsupported value: 'temperature' does not support 0 with this model.", "invalid_request_error", None),
    ]);
    let before = server.seen().len();
    let task = create(&api, &token, &space, question, json!({ "mode": "FAST" })).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    let seen = server.seen();
    let last = &seen.last().context("a request")?.body;
    ensure_eq!(seen.len(), before + 3, "one refusal per parameter, then the call");
    ensure!(last.get("max_tokens").is_none() && last["max_completion_tokens"] == json!(400), "{last}");
    ensure!(last.get("temperature").is_none(), "{last}");
    api.stop().await;
    Ok(())
}

async fn citations_of_missing_evidence_and_unsupported_claims_are_removed_and_missing_usage_is_estimated(
    db: TestDb,
) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let written = "Bees make honey from nectar [2]. They also fly to Mars [9]. Wax holds it [1][2].";
    server.then([Reply::Answer(Answer::new(written).with_usage(None))]);
    let task =
        create(&api, &token, &space, "How do bees make honey and store it?", json!({ "mode": "FAST", "topK": 2 }))
            .await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    let read = trace(&api, &token, &task).await?;
    // The claim no evidence supports goes with its citation of nothing; what stays cites,
    // renumbered in order of first citation, evidence that supports it (which passage
    // that is depends on the backend's ranking, so the check is the grounding rule's).
    let answer = read["answerTrace"]["answer"].as_str().context("answer")?.to_owned();
    ensure!(answer.starts_with("Bees make honey from nectar [1].") && !answer.contains("Mars"), "{answer}");
    let evidence = read["answerTrace"]["evidence"].as_array().cloned().unwrap_or_default();
    for sentence in worker::research::grounding::sentences(&answer) {
        ensure!(!sentence.citations.is_empty(), "every claim is cited: {answer}");
        for number in &sentence.citations {
            let cited = evidence.iter().find(|item| item["citation"] == json!(number)).context("cited evidence")?;
            let text = cited["text"].as_str().unwrap_or_default();
            ensure!(
                worker::research::grounding::supports(&sentence, text),
                "{:?} is not supported by {text}",
                sentence.text
            );
        }
    }
    let completed = event(&db, row.id, "stage:completed").await?;
    let generation = &completed.payload["generation"];
    ensure_eq!(generation["removed_citations"], json!(["[9]"]), "{}", completed.payload);
    let checks = read["answerTrace"]["citationChecks"].as_array().cloned().unwrap_or_default();
    ensure!(
        checks.iter().any(|check| check["verdict"] == "removed_sentence"
            && check["sentence"].as_str().is_some_and(|sentence| sentence.contains("Mars"))),
        "{checks:?}"
    );
    // Verdicts hold each sentence as the model wrote it, with the number it wrote: the
    // citation of evidence that does not exist is a removed citation.
    ensure!(
        checks.iter().any(|check| check["verdict"] == "removed_citation"
            && check["sentence"] == "They also fly to Mars [9]."
            && check["citation"] == 9
            && check["written_citation"] == 9),
        "{checks:?}"
    );
    let first = checks.iter().find(|check| check["sentence"] == "Bees make honey from nectar [2].");
    ensure!(first.is_some_and(|check| check["written_citation"] == 2 && check["citation"] == 1), "{checks:?}");
    let calls = row.cost["stages"]["generating"]["calls"].as_array().cloned().unwrap_or_default();
    ensure_eq!(calls.len(), 1);
    ensure_eq!(calls[0]["estimated"], json!(true), "no usage was sent: {}", row.cost);
    ensure!(calls[0]["output_tokens"].as_i64().is_some_and(|tokens| tokens > 10), "{}", row.cost);
    api.stop().await;
    Ok(())
}

/// What small local models write: prose without citations (attributed to the evidence
/// that supports each sentence), nothing but citation marks, or claims nothing supports
/// (replaced by the extractive answer over the same evidence, cited by construction), or
/// the same claim over and over, cut off mid-sentence (shown once).
async fn weak_answers_are_attributed_or_replaced_by_the_extractive_answer(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let query = "How do bees make honey?";
    let cases = [
        ("Bees make honey from nectar. Worker bees fan it with their wings.", "attributed"),
        ("[1] [2] [3]", "extractive_fallback"),
        ("Honey is made on the Moon by robots.", "extractive_fallback"),
        (
            "Bees make honey from nectar [1]. Bees make honey from nectar [1]. Bees make honey from nectar",
            "removed_sentence",
        ),
    ];
    for (written, verdict) in cases {
        // The repair is as weak as the answer it repairs.
        server.then([Reply::answer(written), Reply::answer(written)]);
        let task = create(&api, &token, &space, query, json!({ "mode": "FAST", "topK": 2 })).await?;
        let row = wait_terminal(&db, &task).await?;
        ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
        let read = trace(&api, &token, &task).await?;
        let answer = read["answerTrace"]["answer"].as_str().context("answer")?.to_owned();
        let evidence = read["answerTrace"]["evidence"].as_array().cloned().unwrap_or_default();
        ensure!(!evidence.is_empty(), "{read}");
        let sentences = worker::research::grounding::sentences(&answer);
        ensure!(!sentences.is_empty(), "{written:?} left no answer");
        for sentence in sentences {
            ensure!(!sentence.citations.is_empty(), "{written:?} gave an uncited claim: {answer}");
            for number in &sentence.citations {
                let cited = evidence.iter().find(|item| item["citation"] == json!(number)).context("cited")?;
                ensure!(
                    worker::research::grounding::supports(&sentence, cited["text"].as_str().unwrap_or_default()),
                    "{written:?}: {:?} is not supported by [{number}]",
                    sentence.text
                );
            }
        }
        // The trace's evidence is what the answer cites, in citation order.
        let numbers: Vec<Value> = evidence.iter().map(|item| item["citation"].clone()).collect();
        let expected: Vec<Value> = (1..=evidence.len()).map(|number| json!(number)).collect();
        ensure_eq!(numbers, expected);
        let checks = read["answerTrace"]["citationChecks"].as_array().cloned().unwrap_or_default();
        ensure!(checks.iter().any(|check| check["verdict"] == verdict), "{written:?}: {checks:?}");
        // The answer was wrong in a way a repair may fix: one more generation said what.
        let completed = event(&db, row.id, "stage:completed").await?;
        let repair = &completed.payload["generation"]["repair"];
        ensure_eq!(repair["outcome"], json!("still_wrong"), "{written:?}: {}", completed.payload);
        // A claim repeated (a weak model looping) is shown once.
        let claims: Vec<Vec<String>> = worker::research::grounding::sentences(&answer)
            .iter()
            .map(worker::research::grounding::Sentence::content_words)
            .collect();
        let distinct: std::collections::HashSet<&Vec<String>> = claims.iter().collect();
        ensure_eq!(distinct.len(), claims.len(), "{written:?} repeated a claim: {answer}");
    }
    api.stop().await;
    Ok(())
}

/// DEEP: after each round the model decides (its JSON wrapped in prose, as weak models
/// write it); a claim the model says its passage does not support loses that citation.
async fn a_deep_task_decides_its_rounds_with_the_model_and_verifies_each_cited_claim(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let more = "Sure! Here is my decision:\n```json\n{\"answered\": false, \"queries\": [\"wax glands\"]}\n```";
    server.then([
        Reply::Auto,          // the plan
        Reply::answer(more),  // after round 1: search "wax glands"
        Reply::Auto,          // after round 2: answered
        Reply::Auto,          // the answer: a cited first sentence per passage
        Reply::answer("No."), // the first claim is refuted
    ]);
    let extra = json!({ "mode": "DEEP", "topK": 1, "limits": { "max_rounds": 3 } });
    let task = create(&api, &token, &space, "How do bees make honey?", extra).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);

    let ends: Vec<Value> = crate::worker_support::events(&db, row.id)
        .await?
        .into_iter()
        .filter(|event| event.payload.get("decision").is_some())
        .map(|event| event.payload)
        .collect();
    let decisions: Vec<&Value> = ends.iter().map(|end| &end["decision"]).collect();
    ensure_eq!(decisions, [&json!("continue"), &json!("answered")], "{ends:#?}");
    ensure_eq!(ends[1]["queries"], json!(["wax glands"]));
    ensure_eq!(ends[0]["engine"]["decision"]["decider"], json!("model"));
    let calls = row.cost["stages"]["analyzing"]["calls"].as_array().cloned().unwrap_or_default();
    ensure_eq!(calls.len(), 2, "one decision per round: {}", row.cost);
    let verifications: Vec<Seen> = server
        .seen()
        .into_iter()
        .filter(|seen| seen.body["messages"][0]["content"].as_str().is_some_and(|text| text.contains("yes or no")))
        .collect();
    ensure!(
        !verifications.is_empty() && verifications.iter().all(|seen| seen.body["max_tokens"] == json!(8)),
        "a verdict is a word: {verifications:#?}"
    );

    let completed = event(&db, row.id, "stage:completed").await?;
    let verification = &completed.payload["generation"]["verification"];
    ensure!(verification["asked"].as_i64().is_some_and(|asked| asked >= 1), "{}", completed.payload);
    ensure_eq!(verification["refuted"], json!(1), "{}", completed.payload);
    let read = trace(&api, &token, &task).await?;
    let checks = read["answerTrace"]["citationChecks"].as_array().cloned().unwrap_or_default();
    let first = checks.first().and_then(|check| check["sentence"].as_str()).unwrap_or_default().to_owned();
    ensure!(
        checks.iter().any(|check| check["sentence"] == json!(first) && check["verdict"] != json!("supported")),
        "the refuted claim kept its citation: {checks:#?}"
    );
    api.stop().await;
    Ok(())
}

/// An answer of citation marks alone is generated once more with what was wrong said;
/// when the budget leaves no room for that call, it is skipped and recorded.
async fn an_answer_without_prose_is_repaired_once_when_the_budget_allows(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    // Prompts free and outputs $10 per million: every call's worst case is $0.01.
    let api = api(&db, &server, |openai| {
        openai.input_usd_per_1m = Some(0.0);
        openai.max_output_tokens = 1_000;
    })
    .await?;
    let (space, token) = space_with_documents(&api).await?;
    let fixed = "Bees make honey from nectar [1].";
    server.then([Reply::answer("[1] [2] [1]"), Reply::answer(fixed)]);
    let task =
        create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST", "budgetUsd": 1.0 })).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    let seen = server.seen();
    ensure_eq!(seen.len(), 2, "the answer and its repair");
    let said: Vec<String> = seen[1].body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    ensure!(said.iter().any(|text| text == "[1] [2] [1]"), "the repair sees the answer: {said:?}");
    ensure!(said.iter().any(|text| text.contains("holds no prose")), "the repair says what was wrong: {said:?}");
    let read = trace(&api, &token, &task).await?;
    ensure_eq!(read["answerTrace"]["answer"], json!(fixed));
    let completed = event(&db, row.id, "stage:completed").await?;
    ensure_eq!(completed.payload["generation"]["repair"]["outcome"], json!("repaired"), "{}", completed.payload);

    // The first call fits in $0.01001; what it spends leaves less than the repair's $0.01.
    server.then([Reply::answer("[1] [2] [1]")]);
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST", "budgetUsd": 0.01001 }))
        .await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    ensure_eq!(server.seen().len(), 3, "no repair call was made");
    let completed = event(&db, row.id, "stage:completed").await?;
    let repair = &completed.payload["generation"]["repair"];
    ensure_eq!((&repair["outcome"], &repair["reason"]), (&json!("skipped"), &json!("budget")), "{}", completed.payload);
    // Nothing the model wrote stated anything: the extractive answer, cited by construction.
    let read = trace(&api, &token, &task).await?;
    let checks = read["answerTrace"]["citationChecks"].as_array().cloned().unwrap_or_default();
    ensure!(checks.iter().any(|check| check["verdict"] == "extractive_fallback"), "{checks:?}");
    api.stop().await;
    Ok(())
}

async fn each_mode_uses_its_own_model(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |openai| {
        openai.model_deep = Some("gpt-4o".to_owned());
        openai.model_auto = Some("gpt-4.1-mini".to_owned());
    })
    .await?;
    let (space, token) = space_with_documents(&api).await?;
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "DEEP" })).await?;
    ensure_eq!(wait_terminal(&db, &task).await?.stage, Stage::Completed);
    ensure!(server.seen().iter().all(|seen| seen.body["model"] == json!("gpt-4o")), "{:#?}", server.seen());
    let before = server.seen().len();
    let task =
        create(&api, &token, &space, "How do bees make honey and store it in wax combs?", json!({ "mode": "AUTO" }))
            .await?;
    ensure_eq!(wait_terminal(&db, &task).await?.stage, Stage::Completed);
    ensure!(server.seen()[before..].iter().all(|seen| seen.body["model"] == json!("gpt-4.1-mini")));
    let before = server.seen().len();
    let task = create(
        &api,
        &token,
        &space,
        "How do bees make honey and store it in wax combs?",
        json!({ "mode": "RESEARCH" }),
    )
    .await?;
    ensure_eq!(wait_terminal(&db, &task).await?.stage, Stage::Completed);
    ensure!(server.seen()[before..].iter().all(|seen| seen.body["model"] == json!(MODEL)), "the default");
    api.stop().await;
    Ok(())
}

/// What a provider echoes back in its errors (several quote the prompt).
const ECHO: &str = "ECHO-OF-THE-PROMPT";

/// A model endpoint that answers 400 quoting the prompt, or streams an error or garbage
/// quoting it: the task fails with a fixed description (status, error type and code,
/// which call), and the provider's words reach no table, no event, no `/metrics` line and
/// no `/ops` page. Before, the 400's message became the task's `error`, which `/ops/stream`
/// showed operators of every tenant.
async fn a_providers_words_reach_no_row_event_metric_or_page(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    server.require_key(KEY);
    let openai = openai_settings(&server);
    let api = crate::live_support::api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.engine.kind = EngineKind::Openai;
        settings.worker.openai = openai;
        settings.worker.openai.max_retries = 1;
        settings.worker.retry_base_ms = 50;
        settings.worker.retry_cap_ms = 200;
        settings.worker.poll_interval_ms = 100;
        settings.worker.default_max_execution_attempts = 1;
        settings.operator_subjects = vec!["ops-admin".to_owned()];
    })
    .await?;
    let (space, token) = space_with_documents(&api).await?;
    let question = "How do bees make honey (codename Bluebird)?";
    let quoting = format!("Invalid prompt: '{ECHO} {question} Bees make honey from nectar.'");
    let cases = [
        Reply::error(400, &quoting, "invalid_request_error", Some("invalid_prompt")),
        Reply::Raw { content_type: "text/event-stream".to_owned(), body: format!("data: {ECHO} {question}\n\n") },
        Reply::Raw {
            content_type: "text/event-stream".to_owned(),
            body: format!("data: {}\n\n", json!({ "error": { "message": quoting, "type": "server_error" } })),
        },
        Reply::Raw { content_type: "application/json".to_owned(), body: format!("{{\"{ECHO}\": \"{question}\"}}") },
    ];
    let mut errors = Vec::new();
    for reply in cases {
        server.always(reply);
        let task = create(&api, &token, &space, question, json!({ "mode": "FAST" })).await?;
        let row = wait_terminal(&db, &task).await?;
        ensure_eq!(row.stage, Stage::Failed, "{:?}", row.error);
        let error = row.error.unwrap_or_default();
        ensure!(error.contains("the generating call"), "the description names the call: {error}");
        ensure!(!error.contains(ECHO) && !error.contains("codename"), "the provider's words in the error: {error}");
        errors.push(error);
    }
    ensure!(errors[0].contains("HTTP 400 (type invalid_request_error, code invalid_prompt)"), "{}", errors[0]);
    let holding = db.tables_holding(ECHO).await?;
    ensure!(holding.is_empty(), "the provider's words are stored in {holding:?}");
    let base = api.server.server.base_url();
    let metrics = reqwest::get(format!("{base}/metrics")).await?.text().await?;
    ensure!(!metrics.contains(ECHO), "the provider's words in /metrics");
    let operator = TestServer::token("ops-admin", "ops");
    let mut stream = reqwest::Client::new().get(format!("{base}/ops/stream")).bearer_auth(&operator).send().await?;
    ensure_eq!(stream.status().as_u16(), 200);
    let mut page = String::new();
    while !page.contains("\n\n") {
        let chunk =
            tokio::time::timeout(Duration::from_secs(10), stream.chunk()).await??.context("the stream ended")?;
        page.push_str(&String::from_utf8_lossy(&chunk));
    }
    ensure!(page.contains("the generating call"), "the failures are on the page: {page}");
    ensure!(!page.contains(ECHO) && !page.contains("codename"), "task content on the operations page: {page}");
    eprintln!("research_openai ({}): stored errors: {errors:#?}", db.backend.name());
    api.stop().await;
    Ok(())
}
