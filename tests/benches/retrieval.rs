//! Retrieval quality and cost: recall@5 and MRR on the evaluation corpus
//! (`kfs_tests::retrieval_eval`) for whole-document search (as before passages), passage
//! full text, and hybrid (full text fused with vectors from the deterministic stand-in
//! embedding endpoint), on SQLite and PostgreSQL; then how long splitting a 5 MiB
//! document takes in each format, including the worst shapes (one huge paragraph, inline
//! markup on every word).
//!
//! Run it with `cargo bench -p workspace-tests --bench retrieval`; the PostgreSQL rows
//! need `KFS_TEST_POSTGRES_URL` (an admin URL, as for the tests).
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use entity::MediaType;
use kfs_tests::embedding_server::EmbeddingServer;
use kfs_tests::retrieval_eval::{self, Corpus, Metrics};
use kfs_tests::{Backend, TestConfig, TestDb};
use worker::config::{ChunkSettings, EmbeddingSettings, WorkerSettings};
use worker::knowledge::backlog::{self, Worked};
use worker::knowledge::chunk::chunk;
use worker::knowledge::embeddings::Embedder;
use worker::knowledge::index::Indexing;
use worker::knowledge::retrieve::Retriever;
use worker::runtime::CancellationToken;

fn main() -> ExitCode {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("retrieval: run it with `cargo bench -p workspace-tests --bench retrieval`");
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("retrieval: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let config = TestConfig::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("building the runtime")?;
    let corpus = retrieval_eval::corpus()?;
    let words: usize = corpus.documents.iter().map(|d| d.content.split_whitespace().count()).sum();
    println!(
        "corpus: {} documents ({words} words), {} questions; a result answers when it is from an answering \
         document and covers half the answer or more",
        corpus.documents.len(),
        corpus.questions.len()
    );
    println!(
        "{:<10} {:<22} {:>9} {:>7} {:>13} {:>12}",
        "backend", "retrieval", "recall@5", "MRR", "doc recall@5", "ms/question"
    );
    for backend in [Backend::Sqlite, Backend::Postgres] {
        if backend == Backend::Postgres && config.postgres_url.is_none() {
            println!("{:<10} skipped: KFS_TEST_POSTGRES_URL is not set", backend.name());
            continue;
        }
        let corpus = &corpus;
        runtime.block_on(TestDb::run(backend, &config, |db| async move {
            for (name, metrics, elapsed) in evaluate(&db, corpus).await? {
                let per_question = elapsed.as_secs_f64() * 1000.0 / metrics.questions as f64;
                println!(
                    "{:<10} {name:<22} {:>9.3} {:>7.3} {:>13.3} {per_question:>12.2}",
                    backend.name(),
                    metrics.recall_at_5,
                    metrics.mrr,
                    metrics.document_recall_at_5
                );
            }
            Ok(())
        }))?;
    }
    splitting()
}

/// The three ways of retrieving, each with its score and the time its questions took.
async fn evaluate(db: &TestDb, corpus: &Corpus) -> anyhow::Result<Vec<(&'static str, Metrics, Duration)>> {
    let whole = retrieval_eval::load_whole(db, corpus).await?;
    let plain = Indexing { chunk: ChunkSettings::default(), embeddings_on: false };
    let split = retrieval_eval::load(db, corpus, plain).await?;
    let server = EmbeddingServer::start().await?;
    let settings = EmbeddingSettings {
        base_url: Some(server.base_url()),
        model: Some("bench-embedding".to_owned()),
        ..EmbeddingSettings::default()
    };
    let hybrid_space = retrieval_eval::load(db, corpus, Indexing { embeddings_on: true, ..plain }).await?;
    embed_everything(db, &settings).await?;
    let hybrid = Retriever::from_settings(&settings).map_err(anyhow::Error::msg)?;

    let mut rows = Vec::new();
    let started = Instant::now();
    rows.push(("whole document", retrieval_eval::whole_documents(db, corpus, &whole).await?, started.elapsed()));
    let started = Instant::now();
    let full_text = retrieval_eval::passages(db, corpus, &split, &Retriever::full_text()).await?;
    rows.push(("passages, full text", full_text, started.elapsed()));
    let started = Instant::now();
    rows.push((
        "passages, hybrid",
        retrieval_eval::passages(db, corpus, &hybrid_space, &hybrid).await?,
        started.elapsed(),
    ));
    Ok(rows)
}

/// Works the embedding backlog until nothing is pending.
async fn embed_everything(db: &TestDb, settings: &EmbeddingSettings) -> anyhow::Result<()> {
    let endpoint = settings.endpoint().map_err(anyhow::Error::msg)?.context("an endpoint")?;
    let embedder = Embedder::new(endpoint, Duration::from_secs(30))?;
    let policy = worker::runtime::backlog_policy(&WorkerSettings::default());
    let stop = CancellationToken::new();
    loop {
        match backlog::embed_due(&db.db, &embedder, &policy, &stop, entity::now_millis).await? {
            Worked::Idle => return Ok(()),
            Worked::Document { .. } => {}
            Worked::Unavailable { wait } => anyhow::bail!("the stand-in endpoint asked to wait {wait:?}"),
        }
    }
}

/// Splitting time for 5 MiB documents of each format and shape.
fn splitting() -> anyhow::Result<()> {
    const SIZE: usize = 5 * 1024 * 1024;
    let fill = |unit: &str| {
        let mut text = unit.repeat(SIZE / unit.len());
        text.truncate(SIZE);
        while !text.is_char_boundary(text.len()) {
            text.pop();
        }
        text
    };
    let cases = [
        (
            "plain, paragraphs",
            MediaType::TextPlain,
            fill("A sentence of prose, with a clause. Another one follows it.\n\n"),
        ),
        ("plain, one paragraph", MediaType::TextPlain, fill("word and another word, ")),
        (
            "markdown, sections",
            MediaType::TextMarkdown,
            fill("## A heading\n\nSome *emphasis* and `code` in a paragraph.\n\n- an item\n- another\n\n"),
        ),
        (
            "html, blocks",
            MediaType::TextHtml,
            fill("<h2>Heading</h2><p>Caf&eacute; text in a <b>paragraph</b>.</p><ul><li>item</li></ul>"),
        ),
        ("html, inline on every word", MediaType::TextHtml, format!("<p>{}</p>", fill("<b>w</b> "))),
        ("unicode, no spaces", MediaType::TextPlain, fill("東京都の天気は晴れです。")),
        ("one-letter paragraphs", MediaType::TextPlain, fill("a\n\n")),
    ];
    println!("\nsplitting 5 MiB documents (default settings: 200-token passages, 40-token overlap)");
    println!("{:<28} {:>10} {:>10}", "document", "passages", "seconds");
    for (name, media, content) in cases {
        let started = Instant::now();
        let passages = match chunk(&content, media, &ChunkSettings::default()) {
            Ok(passages) => passages.len().to_string(),
            Err(refused) => format!("over {}", refused.limit),
        };
        println!("{name:<28} {passages:>10} {:>10.2}", started.elapsed().as_secs_f64());
    }
    Ok(())
}
