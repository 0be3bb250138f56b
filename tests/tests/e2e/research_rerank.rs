//! A reranking endpoint (`KFS_RERANK_*`) through the stand-in (`kfs_tests::rerank_server`):
//! each sub-query's fused candidates go through it, so the evidence follows its order and
//! carries a `rerank` entry; each search is charged to the task; a failing or malformed
//! endpoint leaves the fused order and the stage's event says so; a search that does not
//! fit in the budget is skipped, and the task still answers.
use anyhow::{Context as _, ensure};
use entity::research_task_progress_event as progress;
use kfs_tests::rerank_server::{Reply, RerankServer};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use secrecy::SecretString;
use serde_json::{Value, json};
use uuid::Uuid;
use worker::config::RerankSettings;

use crate::api_support::Api;
use crate::research_openai::{create, space_with_documents, trace, wait_terminal};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_reranker_orders_the_evidence_and_each_search_is_charged,
        a_failing_or_malformed_reranker_leaves_the_fused_order_and_is_recorded,
        a_search_that_does_not_fit_in_the_budget_is_skipped_and_the_task_answers,
        the_reranker_chooses_the_evidence_sentence_the_answer_must_hold,
    ]
}

const MODEL: &str = "rerank-test-1";
const KEY: &str = "rk-test-3e9a";
/// Dollars per 1,000 searches: 0.002 a search.
const PRICE_PER_1K: f64 = 2.0;
const NANOS_PER_SEARCH: i64 = 2_000_000;

/// A server with the embedded built-in engine, reranking through `server`.
async fn api(db: &TestDb, server: &RerankServer) -> anyhow::Result<Api> {
    let rerank = RerankSettings {
        base_url: Some(server.base_url()),
        model: Some(MODEL.to_owned()),
        api_key: Some(SecretString::from(KEY)),
        usd_per_1k_searches: PRICE_PER_1K,
        timeout_ms: 2_000,
        max_retries: 1,
    };
    crate::live_support::api_with(db, |settings| {
        settings.embedded_worker = true;
        settings.worker.rerank = rerank;
        settings.worker.poll_interval_ms = 100;
    })
    .await
}

/// The `rerank` record of the retrieving stage (in the event that leaves it).
async fn rerank_record(db: &TestDb, task: &str) -> anyhow::Result<Value> {
    let event = progress::Entity::find()
        .filter(progress::Column::ResearchTaskJobId.eq(task.parse::<Uuid>()?))
        .filter(progress::Column::IdempotencyKey.eq("stage:analyzing"))
        .one(&db.db)
        .await?
        .context("no stage:analyzing event")?;
    Ok(event.payload["engine"]["rerank"].clone())
}

/// The `lead` record of the generating stage (in the completion's event).
async fn lead_record(db: &TestDb, task: &str) -> anyhow::Result<Value> {
    let events = crate::worker_support::events(db, task.parse::<Uuid>()?).await?;
    events
        .into_iter()
        .find(|event| event.payload["from_stage"] == "generating")
        .map(|event| event.payload["generation"]["lead"].clone())
        .context("no event leaving generating")
}

fn rerank_entries(evidence: &Value) -> Vec<Value> {
    let items = evidence.as_array().cloned().unwrap_or_default();
    items
        .iter()
        .flat_map(|item| item["rankers"].as_array().cloned().unwrap_or_default())
        .filter(|hit| hit["ranker"] == "rerank")
        .collect()
}

async fn a_reranker_orders_the_evidence_and_each_search_is_charged(db: TestDb) -> anyhow::Result<()> {
    let server = RerankServer::start().await?;
    // Full text ranks the honey passage first for this question; the reranker prefers wax.
    server.always(Reply::Prefer("wax combs".to_owned()));
    let api = api(&db, &server).await?;
    let (space, token) = space_with_documents(&api).await?;
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST", "topK": 1 })).await?;
    let done = wait_terminal(&db, &task).await?;
    ensure_eq!(done.stage.as_str(), "completed", "{:?}", done.error);
    let read = trace(&api, &token, &task).await?;
    let evidence = &read["answerTrace"]["evidence"];
    let first = &evidence[0];
    ensure!(first["text"].as_str().is_some_and(|text| text.contains("wax combs")), "the reranker's pick: {evidence}");
    ensure_eq!(
        first["rankers"].as_array().and_then(|hits| hits.iter().find(|hit| hit["ranker"] == "rerank")).cloned(),
        Some(json!({ "ranker": "rerank", "rank": 1, "score": 0.9 }))
    );
    // The request as the common format has it, with the key as a bearer token.
    let seen = server.seen();
    ensure_eq!(seen.len(), 2, "one sub-query in FAST mode, then the answer's sentences");
    let request = &seen[0];
    ensure_eq!(request.authorization.as_deref(), Some(format!("Bearer {KEY}").as_str()));
    ensure_eq!(request.body["model"], json!(MODEL));
    ensure_eq!(request.body["query"], json!("How do bees make honey?"));
    let documents = request.body["documents"].as_array().context("documents")?;
    ensure!(documents.len() >= 2, "the fused candidates are sent: {documents:?}");
    ensure_eq!(request.body["top_n"], json!(documents.len()));
    let record = rerank_record(&db, &task).await?;
    ensure_eq!(record["model"], json!(MODEL));
    ensure_eq!(record["searches"][0]["outcome"], json!("reranked"), "{record}");
    // Charged once, in the retrieving stage, on top of the built-in engine's own estimate.
    let retrieving = done.cost["stages"]["retrieving"]["usd_nanos"].as_i64().context("retrieving cost")?;
    ensure!(
        (NANOS_PER_SEARCH..NANOS_PER_SEARCH + 100_000).contains(&retrieving),
        "retrieving cost {retrieving} nanodollars"
    );
    Ok(())
}

async fn a_failing_or_malformed_reranker_leaves_the_fused_order_and_is_recorded(db: TestDb) -> anyhow::Result<()> {
    let server = RerankServer::start().await?;
    let api = api(&db, &server).await?;
    let (space, token) = space_with_documents(&api).await?;
    for (reply, expected_error) in [
        (Reply::Unavailable, "HTTP 503"),
        (Reply::Malformed(r#"{"results":[{"index":99,"relevance_score":1}]}"#.to_owned()), "malformed"),
        // An endpoint that sends more than any order needs is cut off, not read into memory.
        (Reply::Malformed(" ".repeat(2 * 1024 * 1024)), "passed 1024 KiB"),
    ] {
        server.always(reply);
        let before = server.seen().len();
        let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST" })).await?;
        let done = wait_terminal(&db, &task).await?;
        ensure_eq!(done.stage.as_str(), "completed", "{:?}", done.error);
        let read = trace(&api, &token, &task).await?;
        let evidence = &read["answerTrace"]["evidence"];
        ensure!(evidence.as_array().is_some_and(|items| !items.is_empty()), "evidence in fused order: {read}");
        ensure!(rerank_entries(evidence).is_empty(), "no rerank entry: {evidence}");
        let record = rerank_record(&db, &task).await?;
        let search = &record["searches"][0];
        ensure_eq!(search["outcome"], json!("failed"), "{record}");
        let error = search["error"].as_str().unwrap_or_default();
        ensure!(error.contains(expected_error), "{error}");
        // A transient failure (503, a cut-off body) is tried again once (max_retries 1); a
        // malformed answer is not.
        let tries = server.seen().len() - before;
        // The answer's sentences are sent too, and fail the same way.
        let expected_tries = if expected_error == "malformed" { 2 } else { 4 };
        ensure_eq!(tries, expected_tries, "{error}");
        let lead = lead_record(&db, &task).await?;
        ensure_eq!(lead["outcome"], json!("failed"), "BM25's choice stands: {lead}");
        // Nothing is charged for a search that gave no order.
        let retrieving = done.cost["stages"]["retrieving"]["usd_nanos"].as_i64().context("retrieving cost")?;
        ensure!(retrieving < NANOS_PER_SEARCH, "retrieving cost {retrieving} nanodollars");
    }
    Ok(())
}

async fn a_search_that_does_not_fit_in_the_budget_is_skipped_and_the_task_answers(db: TestDb) -> anyhow::Result<()> {
    let server = RerankServer::start().await?;
    let api = api(&db, &server).await?;
    let (space, token) = space_with_documents(&api).await?;
    // $0.001 covers the built-in engine's estimates, not one $0.002 search.
    let task =
        create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST", "budgetUsd": 0.001 })).await?;
    let done = wait_terminal(&db, &task).await?;
    ensure_eq!(done.stage.as_str(), "completed", "{:?}", done.error);
    ensure_eq!(server.seen().len(), 0, "no request that could not be paid for");
    let record = rerank_record(&db, &task).await?;
    ensure_eq!(
        record["searches"][0],
        json!({ "sub_query": "How do bees make honey?", "outcome": "skipped", "reason": "budget" })
    );
    let read = trace(&api, &token, &task).await?;
    ensure!(read["answerTrace"]["answer"].as_str().is_some_and(|answer| answer.contains("[1]")), "{read}");
    Ok(())
}

/// The answer must hold the evidence sentence that best answers the question: with a
/// reranker, BM25's best sentences go to it and its first is that sentence, so a sentence
/// the extract did not state leads the answer, cited; the request is charged to generating.
async fn the_reranker_chooses_the_evidence_sentence_the_answer_must_hold(db: TestDb) -> anyhow::Result<()> {
    let server = RerankServer::start().await?;
    // Retrieval keeps the wax passage; of its sentences the reranker prefers the glands.
    server.then([Reply::Prefer("wax combs".to_owned()), Reply::Prefer("glands".to_owned())]);
    let api = api(&db, &server).await?;
    let (space, token) = space_with_documents(&api).await?;
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST", "topK": 1 })).await?;
    let done = wait_terminal(&db, &task).await?;
    ensure_eq!(done.stage.as_str(), "completed", "{:?}", done.error);
    let seen = server.seen();
    ensure_eq!(seen.len(), 2);
    ensure_eq!(seen[1].body["query"], json!("How do bees make honey?"));
    let sentences = seen[1].body["documents"].as_array().context("documents")?;
    ensure!(
        sentences.contains(&json!("Bees store honey in wax combs.")) && sentences.len() == 2,
        "the passage's sentences sharing the question's words: {sentences:?}"
    );
    let read = trace(&api, &token, &task).await?;
    let answer = read["answerTrace"]["answer"].as_str().unwrap_or_default();
    ensure_eq!(
        answer,
        "The wax comes from glands on the worker bees' abdomens [1]. Bees store honey in wax combs [1].",
        "the reranker's sentence leads: {read}"
    );
    let lead = lead_record(&db, &task).await?;
    ensure_eq!(lead, json!({ "outcome": "reranked", "sentences": 2, "changed_lead": true }));
    let generating = done.cost["stages"]["generating"]["usd_nanos"].as_i64().context("generating cost")?;
    ensure!(
        (NANOS_PER_SEARCH..NANOS_PER_SEARCH + 100_000).contains(&generating),
        "generating cost {generating} nanodollars"
    );
    Ok(())
}
