//! The embedding backlog against a stand-in OpenAI-compatible endpoint: documents wait as
//! `PENDING` and become `READY` in the background; an endpoint that is down, rate limited
//! or malformed never loses a document or full-text search; a run that loses its lock to an
//! edit writes nothing; retrieval fuses both rankers and falls back to full text.
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use api::config::Settings;
use entity::{
    IndexingStatus, knowledge_document as document, knowledge_passage as passage,
    knowledge_passage_embedding as embedding,
};
use kfs_tests::embedding_server::{DIMENSIONS, EmbeddingServer, Reply};
use kfs_tests::process::wait_until;
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use secrecy::SecretString;
use serde_json::json;
use uuid::Uuid;
use worker::config::{EmbeddingSettings, WorkerSettings};
use worker::knowledge::backlog::{self, Worked};
use worker::knowledge::embeddings::Embedder;
use worker::knowledge::retrieve::Retriever;
use worker::knowledge::search::{Ranker, Scope};
use worker::runtime::CancellationToken;

use crate::api_support::{Api, string_at};
use crate::knowledge_documents::add;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        documents_are_embedded_in_the_background_and_retrieval_fuses_both_rankers,
        an_endpoint_that_is_down_leaves_documents_pending_until_it_returns,
        a_rate_limit_is_waited_out_for_at_least_its_retry_after,
        malformed_responses_fail_the_document_and_full_text_still_finds_it,
        a_refusal_quoting_the_input_fails_the_document_without_keeping_the_quote,
        an_edit_during_an_embedding_run_fences_the_run_out,
        two_workers_never_embed_the_same_document_at_once,
        turning_embeddings_on_later_embeds_what_is_already_stored,
    ]
}

const MODEL: &str = "test-embedding-1";
const KEY: &str = "sk-test-key";
const READ: &str = "query($id: UUID!) { knowledgeDocument(id: $id) { revision indexingStatus indexingError } }";

/// The embeddings settings for the stand-in, with the test's key.
fn embedding_settings(server: &EmbeddingServer) -> EmbeddingSettings {
    EmbeddingSettings {
        base_url: Some(server.base_url()),
        model: Some(MODEL.to_owned()),
        api_key: Some(SecretString::from(KEY)),
        batch_size: 4,
        timeout_ms: 5_000,
        query_timeout_ms: 2_000,
        ..EmbeddingSettings::default()
    }
}

/// Worker settings that retry quickly, so tests wait milliseconds, not minutes.
fn quick(settings: &mut WorkerSettings, server: &EmbeddingServer) {
    settings.embeddings = embedding_settings(server);
    settings.retry_base_ms = 50;
    settings.retry_cap_ms = 200;
    settings.poll_interval_ms = 100;
}

/// A server with the embedded worker and embeddings through `server`.
async fn api(db: &TestDb, server: &EmbeddingServer, tweak: impl FnOnce(&mut Settings)) -> anyhow::Result<Api> {
    crate::live_support::api_with(db, |settings| {
        settings.embedded_worker = true;
        quick(&mut settings.worker, server);
        tweak(settings);
    })
    .await
}

/// The document's status as the API shows it.
async fn status(api: &Api, token: &str, id: &str) -> anyhow::Result<serde_json::Value> {
    Ok(api.data(Some(token), READ, json!({ "id": id })).await?["knowledgeDocument"].clone())
}

async fn wait_for_status(api: &Api, token: &str, id: &str, wanted: &str) -> anyhow::Result<serde_json::Value> {
    wait_until(Duration::from_secs(30), &format!("the document to be {wanted}"), async || {
        Ok(status(api, token, id).await?["indexingStatus"] == wanted)
    })
    .await?;
    status(api, token, id).await
}

async fn embeddings_of(db: &TestDb, id: &str) -> anyhow::Result<Vec<embedding::Model>> {
    let passages: Vec<Uuid> = passage::Entity::find()
        .filter(passage::Column::DocumentId.eq(id.parse::<Uuid>()?))
        .all(&db.db)
        .await?
        .into_iter()
        .map(|row| row.id)
        .collect();
    Ok(embedding::Entity::find().filter(embedding::Column::PassageId.is_in(passages)).all(&db.db).await?)
}

/// Hybrid retrieval through the stand-in, as research runs it.
async fn hybrid(
    db: &TestDb,
    server: &EmbeddingServer,
    tenant: &str,
    space: &str,
    query: &str,
) -> anyhow::Result<Vec<worker::knowledge::search::Found>> {
    let retriever = Retriever::from_settings(&embedding_settings(server)).map_err(anyhow::Error::msg)?;
    let scope = Scope::space(tenant, space.parse()?);
    Ok(retriever.search(&db.db, scope, query, 10).await?)
}

/// Enough paragraphs for several passages (and so several batches of four).
fn long_document(topic: &str) -> String {
    (0..12)
        .map(|n| format!("Paragraph {n} about {topic}: the {topic} keeper writes notes on {topic} number {n}, at length, so that this paragraph is long enough to stand as a passage of its own among the rest of them.\n\n"))
        .collect()
}

async fn documents_are_embedded_in_the_background_and_retrieval_fuses_both_rankers(db: TestDb) -> anyhow::Result<()> {
    let server = EmbeddingServer::start().await?;
    server.require_key(KEY);
    server.hold();
    // Passages of one paragraph each, so the document takes several batches.
    let api = api(&db, &server, |settings| {
        settings.worker.chunk.target_tokens = 48;
        settings.worker.chunk.overlap_tokens = 8;
    })
    .await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = add(&api, &token, &space, "Lighthouses", &long_document("lighthouse"), "TEXT_PLAIN").await?;
    ensure_eq!(status(&api, &token, &id).await?["indexingStatus"], json!("PENDING"), "adding returns before embedding");
    server.release();
    let ready = wait_for_status(&api, &token, &id, "READY").await?;
    ensure!(ready["indexingError"].is_null(), "{ready}");
    let stored = embeddings_of(&db, &id).await?;
    let passages =
        passage::Entity::find().filter(passage::Column::DocumentId.eq(id.parse::<Uuid>()?)).count(&db.db).await?;
    ensure!(passages > 4, "several batches: {passages} passages");
    ensure_eq!(stored.len() as u64, passages, "every passage has its vector");
    ensure!(
        stored
            .iter()
            .all(|row| row.model == MODEL && row.dimensions == DIMENSIONS as i32 && row.vector.len() == 4 * DIMENSIONS)
    );
    let seen = server.seen();
    ensure!(
        seen.iter()
            .all(|request| request.authorization.as_deref() == Some("Bearer sk-test-key") && request.model == MODEL)
    );
    ensure!(seen.iter().all(|request| request.inputs <= 4), "batches of at most KFS_EMBEDDINGS_BATCH_SIZE");

    // Retrieval: both rankers, fused; the query itself is embedded by the endpoint.
    let found = hybrid(&db, &server, &api.tenant, &space, "lighthouse keeper notes").await?;
    ensure!(!found.is_empty());
    let both = found.iter().filter(|hit| {
        hit.rankers.iter().any(|r| r.ranker == Ranker::FullText)
            && hit.rankers.iter().any(|r| r.ranker == Ranker::Vector)
    });
    ensure!(both.count() > 0, "fused: {found:?}");
    // A research task's evidence records the rankers too.
    let create = "mutation($s: UUID!) { createResearchTask(input: {knowledgeSpaceId: $s, query: \"lighthouse keeper notes\"}) { id } }";
    let task = string_at(&api.data(Some(&token), create, json!({ "s": space })).await?, "/createResearchTask/id")?;
    let read = "query($id: UUID!) { researchTask(id: $id) { stage answerTrace { evidence } } }";
    wait_until(Duration::from_secs(60), "the task to complete", async || {
        Ok(api.data(Some(&token), read, json!({ "id": task })).await?["researchTask"]["stage"] == "COMPLETED")
    })
    .await?;
    let evidence =
        api.data(Some(&token), read, json!({ "id": task })).await?["researchTask"]["answerTrace"]["evidence"].clone();
    let rankers: Vec<String> = evidence
        .as_array()
        .context("evidence")?
        .iter()
        .flat_map(|item| item["rankers"].as_array().cloned().unwrap_or_default())
        .filter_map(|hit| hit["ranker"].as_str().map(str::to_owned))
        .collect();
    ensure!(rankers.contains(&"vector".to_owned()) && rankers.contains(&"full_text".to_owned()), "{evidence}");
    api.stop().await;
    Ok(())
}

async fn an_endpoint_that_is_down_leaves_documents_pending_until_it_returns(db: TestDb) -> anyhow::Result<()> {
    let server = EmbeddingServer::start().await?;
    server.go_down();
    let api = api(&db, &server, |_| {}).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = add(&api, &token, &space, "Tides", "Spring tides follow the full moon.", "TEXT_PLAIN").await?;
    wait_until(Duration::from_secs(30), "a failed attempt to be recorded", async || {
        Ok(status(&api, &token, &id).await?["indexingError"]
            .as_str()
            .is_some_and(|error| error.contains("could not connect")))
    })
    .await?;
    ensure_eq!(status(&api, &token, &id).await?["indexingStatus"], json!("PENDING"), "an outage is not a failure");
    // Retrieval goes on by full text alone while the endpoint is down.
    let found = hybrid(&db, &server, &api.tenant, &space, "spring tides").await?;
    ensure!(found.len() == 1 && found[0].rankers.iter().all(|r| r.ranker == Ranker::FullText), "{found:?}");
    server.come_back().await?;
    let ready = wait_for_status(&api, &token, &id, "READY").await?;
    ensure!(ready["indexingError"].is_null(), "{ready}");
    ensure_eq!(embeddings_of(&db, &id).await?.len(), 1);
    api.stop().await;
    Ok(())
}

async fn a_rate_limit_is_waited_out_for_at_least_its_retry_after(db: TestDb) -> anyhow::Result<()> {
    let server = EmbeddingServer::start().await?;
    server.then([Reply::RateLimited { retry_after_secs: 2 }]);
    let api = api(&db, &server, |_| {}).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = add(&api, &token, &space, "Tides", "Neap tides come with the half moon.", "TEXT_PLAIN").await?;
    wait_for_status(&api, &token, &id, "READY").await?;
    let seen = server.seen();
    ensure!(seen.len() >= 2, "{seen:?}");
    ensure_eq!(seen[0].reply, Reply::RateLimited { retry_after_secs: 2 });
    let waited = seen[1].at.duration_since(seen[0].at);
    ensure!(waited >= Duration::from_secs(2), "retried after {waited:?}, before Retry-After: 2");
    api.stop().await;
    Ok(())
}

async fn malformed_responses_fail_the_document_and_full_text_still_finds_it(db: TestDb) -> anyhow::Result<()> {
    let server = EmbeddingServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let bodies = [
        "{\"object\":\"list\",\"data\":[]}".to_owned(),
        "<html>502 Bad Gateway</html>".to_owned(),
        "{\"data\":[{\"index\":0,\"embedding\":[1,2]},{\"index\":0,\"embedding\":[1,2]}]}".to_owned(),
    ];
    for (n, body) in bodies.iter().enumerate() {
        server.always(Reply::Malformed(body.clone()));
        let id =
            add(&api, &token, &space, &format!("Doc {n}"), &format!("Beacon number {n} shines."), "TEXT_PLAIN").await?;
        let failed = wait_for_status(&api, &token, &id, "FAILED").await?;
        let error = failed["indexingError"].as_str().context("an error")?;
        ensure!(error.contains("malformed"), "a clear error: {error}");
        ensure!(!error.contains(KEY), "no credential in the error");
        let found = hybrid(&db, &server, &api.tenant, &space, &format!("beacon {n}")).await?;
        ensure!(found.iter().any(|hit| hit.document_id.to_string() == id), "full text still finds it: {found:?}");
    }
    let attempts = server.seen().len();
    ensure!(attempts >= bodies.len(), "one request per document at least");
    api.stop().await;
    Ok(())
}

/// An embeddings endpoint that refuses with a message quoting the passage it was sent:
/// the document fails with the status and code alone, and the quote is kept nowhere.
async fn a_refusal_quoting_the_input_fails_the_document_without_keeping_the_quote(db: TestDb) -> anyhow::Result<()> {
    let server = EmbeddingServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    server.always(Reply::Error {
        status: 400,
        message: "This input violates the content policy".to_owned(),
        code: Some("content_policy_violation".to_owned()),
        echo_input: true,
    });
    let id = add(&api, &token, &space, "Secret", "Zanzibar-quartz is the secret ingredient.", "TEXT_PLAIN").await?;
    let failed = wait_for_status(&api, &token, &id, "FAILED").await?;
    let error = failed["indexingError"].as_str().context("an error")?;
    ensure!(error.contains("HTTP 400") && error.contains("content_policy_violation"), "{error}");
    ensure!(!error.contains("policy") || !error.contains("violates"), "the provider's words: {error}");
    ensure!(!error.contains("Zanzibar"), "the quoted input in the error: {error}");
    // The document's own content holds the word; nothing else may.
    let holding = db.tables_holding("This input violates").await?;
    ensure!(holding.is_empty(), "the provider's words are stored in {holding:?}");
    api.stop().await;
    Ok(())
}

/// The backlog as one worker runs it, against the stand-in.
fn backlog_parts(server: &EmbeddingServer, worker_id: &str) -> anyhow::Result<(Embedder, backlog::BacklogPolicy)> {
    let endpoint = embedding_settings(server).endpoint().map_err(anyhow::Error::msg)?.context("configured")?;
    let embedder = Embedder::new(endpoint, Duration::from_secs(10))?;
    let mut settings = WorkerSettings { worker_id: worker_id.to_owned(), ..WorkerSettings::default() };
    quick(&mut settings, server);
    Ok((embedder, worker::runtime::backlog_policy(&settings)))
}

async fn an_edit_during_an_embedding_run_fences_the_run_out(db: TestDb) -> anyhow::Result<()> {
    let server = EmbeddingServer::start().await?;
    // The API writes documents as pending (embeddings configured) but runs no worker.
    let api = crate::live_support::api_with(&db, |settings| quick(&mut settings.worker, &server)).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = add(&api, &token, &space, "Tides", &long_document("tide"), "TEXT_PLAIN").await?;
    let (embedder, policy) = backlog_parts(&server, "worker-a")?;
    server.hold();
    let db_handle = db.db.clone();
    let stop = CancellationToken::new();
    let run =
        tokio::spawn(
            async move { backlog::embed_due(&db_handle, &embedder, &policy, &stop, entity::now_millis).await },
        );
    wait_until(Duration::from_secs(10), "the run's first request", async || Ok(!server.seen().is_empty())).await?;
    let update = "mutation($id: UUID!) { updateKnowledgeDocument(id: $id, input: {content: \"A new text about currents.\"}) { revision indexingStatus } }";
    let updated = api.data(Some(&token), update, json!({ "id": id })).await?;
    ensure!(
        updated["updateKnowledgeDocument"]["revision"] == 2
            && updated["updateKnowledgeDocument"]["indexingStatus"] == "PENDING",
        "{updated}"
    );
    server.release();
    let worked = run.await??;
    ensure!(matches!(worked, Worked::Document { embedded: 0, status: IndexingStatus::Pending, .. }), "{worked:?}");
    ensure!(embeddings_of(&db, &id).await?.is_empty(), "the stale run wrote no vector");
    let row = document::Entity::find_by_id(id.parse::<Uuid>()?).one(&db.db).await?.context("the document")?;
    ensure!(row.indexing_lock_token.is_none() && row.indexing_status == IndexingStatus::Pending, "{row:?}");
    // The next run embeds the new revision.
    let (embedder, policy) = backlog_parts(&server, "worker-a")?;
    let worked = backlog::embed_due(&db.db, &embedder, &policy, &CancellationToken::new(), entity::now_millis).await?;
    ensure!(matches!(worked, Worked::Document { embedded: 1, status: IndexingStatus::Ready, .. }), "{worked:?}");
    ensure_eq!(embeddings_of(&db, &id).await?.len(), 1);
    api.stop().await;
    Ok(())
}

async fn two_workers_never_embed_the_same_document_at_once(db: TestDb) -> anyhow::Result<()> {
    let server = Arc::new(EmbeddingServer::start().await?);
    let api = crate::live_support::api_with(&db, |settings| quick(&mut settings.worker, &server)).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let id = add(&api, &token, &space, "Tides", "Spring tides follow the full moon.", "TEXT_PLAIN").await?;
    server.hold();
    let (a, policy_a) = backlog_parts(&server, "worker-a")?;
    let (b, policy_b) = backlog_parts(&server, "worker-b")?;
    let db_a = db.db.clone();
    let first = tokio::spawn(async move {
        backlog::embed_due(&db_a, &a, &policy_a, &CancellationToken::new(), entity::now_millis).await
    });
    wait_until(Duration::from_secs(10), "worker a's request", async || Ok(!server.seen().is_empty())).await?;
    let second = backlog::embed_due(&db.db, &b, &policy_b, &CancellationToken::new(), entity::now_millis).await?;
    ensure_eq!(second, Worked::Idle, "the one document is leased to worker a");
    server.release();
    let first = first.await??;
    ensure!(matches!(first, Worked::Document { embedded: 1, status: IndexingStatus::Ready, .. }), "{first:?}");
    ensure_eq!(server.seen().len(), 1, "one request in all");
    ensure_eq!(status(&api, &token, &id).await?["indexingStatus"], json!("READY"));
    api.stop().await;
    Ok(())
}

async fn turning_embeddings_on_later_embeds_what_is_already_stored(db: TestDb) -> anyhow::Result<()> {
    let plain = crate::live_support::api_with(&db, |settings| settings.embedded_worker = true).await?;
    let space = plain.space("alice").await?;
    let token = plain.token("alice");
    let id = add(&plain, &token, &space, "Tides", "Spring tides follow the full moon.", "TEXT_PLAIN").await?;
    ensure_eq!(status(&plain, &token, &id).await?["indexingStatus"], json!("READY"), "full text is all there is");
    let tenant = plain.tenant.clone();
    plain.stop().await;

    let server = EmbeddingServer::start().await?;
    let mut hybrid_api = api(&db, &server, |_| {}).await?;
    hybrid_api.tenant = tenant;
    wait_for_status(&hybrid_api, &token, &id, "READY").await?;
    ensure_eq!(embeddings_of(&db, &id).await?.len(), 1, "start-up put the stored document back in the backlog");
    hybrid_api.stop().await;

    // And off again: nothing waits for embeddings that will never come.
    let server_down = EmbeddingServer::start().await?;
    server_down.go_down();
    let waiting = api(&db, &server_down, |settings| settings.embedded_worker = false).await?;
    let update =
        "mutation($id: UUID!) { updateKnowledgeDocument(id: $id, input: {title: \"Tides!\"}) { indexingStatus } }";
    let pending = waiting.data(Some(&token), update, json!({ "id": id })).await?;
    ensure_eq!(pending["updateKnowledgeDocument"]["indexingStatus"], json!("PENDING"));
    waiting.stop().await;
    let off = crate::live_support::api_with(&db, |_| {}).await?;
    ensure_eq!(status(&off, &token, &id).await?["indexingStatus"], json!("READY"));
    off.stop().await;
    Ok(())
}
