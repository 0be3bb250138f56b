//! `AnswerTrace.citations`: each citation of a final answer, typed, with the words of its
//! passage that support the sentence (the quote) located in the document, so that
//! `KnowledgeDocument.excerpt` over the quote's range shows exactly them; MCP's
//! `get_research` carries the same quotes per evidence number.
use anyhow::{Context as _, ensure};
use kfs_tests::openai_server::{OpenAiServer, Reply};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use serde_json::json;

use crate::knowledge_documents::add;
use crate::research_openai::{api, create, wait_terminal};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        each_citation_quotes_the_words_that_support_its_sentence,
        with_embeddings_a_paraphrase_in_other_words_is_supported_by_meaning
    ]
}

/// A Markdown page with markup around the words that answer.
const STREAMS: &str = "---\ntitle: Streams\n---\n# Streams\n\n## Buffering\n\n\
    Streams move data between places. The default `highWaterMark` of a byte stream is **16384** bytes \
    ([see the guide](https://example.test/guide)). <!--introduced_in=v0.9.4-->\n\n\
    Object mode streams count objects, not bytes.\n";

/// Everything a client reads about the citations of a task's answer.
const CITATIONS: &str = "query($id: UUID!) { researchTask(id: $id) { answerTrace { answer evidence citations { \
    n sentence verdict \
    evidence { citation documentId title passageId text charStart charEnd pageStart pageEnd headingPath sourceUri \
               rankers { ranker rank score } score } \
    quote { text charStart charEnd pageStart pageEnd documentRevision } } } } }";

const EXCERPT: &str = "query($id: UUID!, $s: Int!, $e: Int!, $r: Int) { knowledgeDocument(id: $id) { \
    excerpt(charStart: $s, charEnd: $e, revision: $r) } }";

/// A model's paraphrase is kept and cited; its quote is the passage sentence that supports
/// it, in clean text, and its range selects exactly that sentence of the stored Markdown
/// (markup included, nothing of the sentences around it).
async fn each_citation_quotes_the_words_that_support_its_sentence(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let document = add(&api, &token, &space, "Streams", STREAMS, "TEXT_MARKDOWN").await?;
    let written = "A byte stream's default highWaterMark is 16384 bytes [1].";
    server.then([Reply::answer(written)]);
    let task = create(&api, &token, &space, "What is the default highWaterMark?", json!({ "mode": "FAST" })).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, entity::Stage::Completed, "{:?}", row.error);
    let read = api.data(Some(&token), CITATIONS, json!({ "id": task })).await?;
    let trace = &read["researchTask"]["answerTrace"];
    ensure_eq!(trace["answer"], json!(written), "the paraphrase passes whole: {trace}");
    let citations = trace["citations"].as_array().context("citations")?;
    ensure_eq!(citations.len(), 1, "{trace}");
    let citation = &citations[0];
    ensure_eq!(citation["n"], json!(1));
    ensure_eq!(citation["sentence"], json!(written));
    ensure_eq!(citation["verdict"], json!("SUPPORTED"));
    let evidence = &citation["evidence"];
    ensure_eq!(evidence["citation"], json!(1));
    ensure_eq!(evidence["documentId"], json!(document));
    ensure_eq!(evidence["headingPath"], json!(["Streams", "Buffering"]), "front matter is no heading: {evidence}");
    ensure!(evidence["rankers"].as_array().is_some_and(|rankers| !rankers.is_empty()), "{evidence}");
    ensure_eq!(evidence["rankers"][0]["ranker"], json!("FULL_TEXT"));
    ensure_eq!(evidence["passageId"], trace["evidence"][0]["passage_id"], "the same item as `evidence`");
    let quote = &citation["quote"];
    ensure_eq!(
        quote["text"],
        json!("The default highWaterMark of a byte stream is 16384 bytes (see the guide)."),
        "the sentence the model was shown: {quote}"
    );
    ensure_eq!(quote["documentRevision"], json!(1));
    ensure!(quote["pageStart"].is_null() && quote["pageEnd"].is_null(), "Markdown has no pages: {quote}");
    let (start, end) = (quote["charStart"].as_i64().context("start")?, quote["charEnd"].as_i64().context("end")?);
    let (passage_start, passage_end) = (evidence["charStart"].as_i64(), evidence["charEnd"].as_i64());
    ensure!(
        passage_start.is_some_and(|at| at <= start) && passage_end.is_some_and(|at| end <= at),
        "the quote lies inside its passage: {quote} {evidence}"
    );
    let shown = api
        .data(Some(&token), EXCERPT, json!({ "id": document, "s": start, "e": end, "r": quote["documentRevision"] }))
        .await?;
    ensure_eq!(
        shown["knowledgeDocument"]["excerpt"],
        json!(
            "The default `highWaterMark` of a byte stream is **16384** bytes ([see the guide](https://example.test/guide))."
        ),
        "the range selects exactly the supporting sentence as stored"
    );

    // MCP: the same quote under the evidence number, with the sentence citing it.
    let done = crate::mcp_endpoint::call(&api, &token, "get_research", json!({ "task_id": task })).await?;
    let content = &done["result"]["structuredContent"];
    let quotes = &content["citations"][0]["quotes"];
    ensure_eq!(
        quotes,
        &json!([{ "sentence": written, "text": quote["text"], "char_start": start, "char_end": end }]),
        "{content}"
    );
    api.stop().await;
    Ok(())
}

/// A sentence sharing too few of its passage's words for the lexical check is kept when an
/// embeddings endpoint (the stand-in, at a threshold its hashed vectors reach) finds it as
/// similar as the threshold to the passage sentence it paraphrases; the vectors come in one
/// request, and the generating event says so.
async fn with_embeddings_a_paraphrase_in_other_words_is_supported_by_meaning(db: TestDb) -> anyhow::Result<()> {
    use kfs_tests::embedding_server::EmbeddingServer;
    use worker::research::support::{Reading, Refusal, check};
    let written = "Unless configured otherwise, a byte stream buffers up to 16384 bytes before its highWaterMark \
        is reached [1].";
    let lexical = check(&Reading::new(&written.replace(" [1]", "")), &Reading::new(STREAMS));
    ensure_eq!(lexical.refusal, Some(Refusal::TooFewWords), "words alone refuse it: {lexical:?}");

    let model = OpenAiServer::start().await?;
    let embeddings = EmbeddingServer::start().await?;
    model.require_key(crate::research_openai::KEY);
    let openai = crate::research_openai::openai_settings(&model);
    let api = crate::live_support::api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.engine.kind = worker::model_settings::EngineKind::Openai;
        settings.worker.openai = openai;
        settings.worker.poll_interval_ms = 100;
        settings.worker.embeddings = worker::model_settings::EmbeddingSettings {
            base_url: Some(embeddings.base_url()),
            model: Some("test-embedding-1".to_owned()),
            support_threshold: 0.55,
            ..worker::model_settings::EmbeddingSettings::default()
        };
    })
    .await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    add(&api, &token, &space, "Streams", STREAMS, "TEXT_MARKDOWN").await?;
    model.then([Reply::answer(written)]);
    let task = create(&api, &token, &space, "What is the default highWaterMark?", json!({ "mode": "FAST" })).await?;
    let row = wait_terminal(&db, &task).await?;
    ensure_eq!(row.stage, entity::Stage::Completed, "{:?}", row.error);
    let read = api.data(Some(&token), CITATIONS, json!({ "id": task })).await?;
    let trace = &read["researchTask"]["answerTrace"];
    ensure_eq!(trace["answer"], json!(written), "kept whole by meaning: {trace}");
    let citation = &trace["citations"][0];
    ensure_eq!(citation["verdict"], json!("SUPPORTED"));
    ensure_eq!(
        citation["quote"]["text"],
        json!("The default highWaterMark of a byte stream is 16384 bytes (see the guide)."),
        "the quote is the sentence it means: {citation}"
    );
    let events = crate::worker_support::events(&db, row.id).await?;
    let similarity =
        events.iter().find_map(|event| event.payload["generation"].get("similarity").cloned()).with_context(|| {
            let payloads: Vec<&serde_json::Value> = events.iter().map(|event| &event.payload).collect();
            format!("the generating event records the comparison: {payloads:?}")
        })?;
    ensure_eq!(similarity["outcome"], json!("embedded"), "{similarity}");
    ensure_eq!(similarity["threshold"], json!(0.55));
    api.stop().await;
    Ok(())
}
