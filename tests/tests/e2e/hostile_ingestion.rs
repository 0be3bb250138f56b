//! Documents shaped to cost memory out of proportion to their size: 5 MiB of one-letter
//! paragraphs (`"a\n\n"` repeated), which once added about 300 MiB to the API's resident
//! memory each and took eight at once to a 3.75 GiB peak. Against the `api` binary in a
//! process of its own, whose `/proc/<pid>/status` is read: one such document adds less
//! than 100 MiB at peak, eight at once keep the peak under 1 GiB, and resident memory
//! comes back near where it started. A document that splits past the passage limit is
//! BAD_USER_INPUT naming it; callers past the splitting turns wait, or are told to come
//! back (RATE_LIMITED with `Retry-After`), never a server error.
use std::time::Duration;

use anyhow::{Context as _, ensure};
use kfs_tests::process::{ApiProcess, Binaries, api_command};
use kfs_tests::server::{GraphqlClient, TestServer};
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};
use uuid::Uuid;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        pathological_documents_cost_bounded_memory_alone_and_eight_at_once,
        a_document_past_the_passage_limit_is_refused_and_busy_splitting_says_when_to_return,
    ]
}

/// A process's memory figure (`VmRSS`, `VmHWM`) in KiB.
fn memory_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

const ADD: &str = "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }";

/// Adds `content` as a plain-text document; the whole answer.
async fn add(client: &GraphqlClient, space: &str, content: &str) -> anyhow::Result<Value> {
    let input =
        json!({ "knowledgeSpaceId": space, "title": "Pathological", "content": content, "mediaType": "TEXT_PLAIN" });
    client.call(ADD, json!({ "input": input })).await
}

async fn pathological_documents_cost_bounded_memory_alone_and_eight_at_once(db: TestDb) -> anyhow::Result<()> {
    let binaries = Binaries::build().await?;
    let api = ApiProcess::start(api_command(&binaries.api, &db.url)).await?;
    let pid = api.process.id();
    let tenant = format!("tenant-{}", Uuid::new_v4().simple());
    let client = GraphqlClient::new(api.graphql_url(), TestServer::token("alice", &tenant));
    let space = client.run("mutation { createKnowledgeSpace(input: {name: \"m\"}) { id } }", json!({})).await?;
    let space = space.pointer("/createKnowledgeSpace/id").and_then(Value::as_str).context("no space")?.to_owned();
    // Warm up with an ordinary document, so the baseline includes pools and caches.
    ensure!(add(&client, &space, "A small warm-up paragraph.").await?.get("errors").is_none());
    let content = "a\n\n".repeat(5 * 1024 * 1024 / 3);
    let baseline = memory_kib(pid, "VmRSS")?;

    let answer = add(&client, &space, &content).await?;
    ensure!(answer.get("errors").is_none(), "one pathological document: {answer}");
    let one_peak = memory_kib(pid, "VmHWM")?;
    let added_by_one = one_peak.saturating_sub(baseline);

    let adds: Vec<_> = (0..8).map(|_| add(&client, &space, &content)).collect();
    let answers = futures_util::future::join_all(adds).await;
    let mut codes = Vec::new();
    for answer in answers {
        let answer = answer?;
        codes.push(kfs_tests::server::first_error_code(&answer).unwrap_or_else(|| "ok".to_owned()));
    }
    ensure!(codes.iter().all(|code| code == "ok" || code == "RATE_LIMITED"), "eight at once: {codes:?}");
    let eight_peak = memory_kib(pid, "VmHWM")?;
    // Memory freed by the process may take a moment to be handed back.
    // What the process frees goes back to the system within a moment (the binaries run
    // on mimalloc); what stays is code paged in and connection buffers sized by the
    // largest statements.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = memory_kib(pid, "VmRSS")?;
    eprintln!(
        "hostile_ingestion ({}): resident {} MiB at start; one 5 MiB document of one-letter paragraphs: peak {} MiB (+{} MiB); \
         eight at once ({codes:?}): peak {} MiB; afterwards {} MiB",
        db.backend.name(),
        baseline / 1024,
        one_peak / 1024,
        added_by_one / 1024,
        eight_peak / 1024,
        after / 1024
    );
    ensure!(added_by_one < 100 * 1024, "one document added {} MiB at peak", added_by_one / 1024);
    ensure!(eight_peak < 1024 * 1024, "eight at once peaked at {} MiB", eight_peak / 1024);
    ensure!(
        after < baseline + 200 * 1024,
        "resident memory stayed at {} MiB after (from {} MiB)",
        after / 1024,
        baseline / 1024
    );
    Ok(())
}

async fn a_document_past_the_passage_limit_is_refused_and_busy_splitting_says_when_to_return(
    db: TestDb,
) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| {
        settings.worker.chunk.max_passages = 50;
        settings.worker.chunk.concurrency = 1;
        settings.worker.chunk.wait_ms = 1;
    })
    .await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let client = GraphqlClient::new(api.server.graphql_url(), token.clone());
    // Distinct headings keep every paragraph a passage of its own.
    let many = (0..60).map(|n| format!("# Heading {n}\n\nParagraph {n}.\n")).collect::<String>();
    let input = json!({ "knowledgeSpaceId": space, "title": "Many", "content": many, "mediaType": "TEXT_MARKDOWN" });
    let refused = client.call(ADD, json!({ "input": input })).await?;
    ensure!(kfs_tests::server::first_error_code(&refused).as_deref() == Some("BAD_USER_INPUT"), "{refused}");
    let message = refused.pointer("/errors/0/message").and_then(Value::as_str).unwrap_or_default();
    ensure!(message.contains("50 passages") && message.contains("KFS_CHUNK_MAX_PASSAGES"), "{message}");
    // One turn, no waiting: of several large documents at once, those without a turn are
    // told when to come back.
    let large = "word ".repeat(40_000);
    let posts: Vec<_> = (0..6)
        .map(|_| {
            let input =
                json!({ "knowledgeSpaceId": space, "title": "Large", "content": large, "mediaType": "TEXT_PLAIN" });
            api.server
                .http
                .post(api.server.graphql_url())
                .bearer_auth(&token)
                .json(&json!({ "query": ADD, "variables": { "input": input } }))
                .send()
        })
        .collect();
    let mut limited = 0;
    for response in futures_util::future::join_all(posts).await {
        let response = response?;
        let status = response.status().as_u16();
        let retry_after = response.headers().get("retry-after").cloned();
        let body: Value = response.json().await?;
        match kfs_tests::server::first_error_code(&body).as_deref() {
            None => ensure!(status == 200, "{status}: {body}"),
            Some("RATE_LIMITED") => {
                limited += 1;
                ensure!(status == 429 && retry_after.is_some(), "{status} without Retry-After: {body}");
            }
            // 50 passages of 200 tokens hold 40,000 words only just: either way is fine.
            Some("BAD_USER_INPUT") => {}
            Some(other) => anyhow::bail!("{other}: {body}"),
        }
    }
    ensure!(limited >= 1, "six large documents at once with one turn and no wait: none was turned away");
    api.stop().await;
    Ok(())
}
