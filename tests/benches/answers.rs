//! Answer quality: runs research tasks on the first `KFS_BENCH_QUESTIONS` (8) questions of
//! the retrieval evaluation (`kfs_tests::retrieval_eval`, its corpus loaded through the API)
//! in each mode, through the embedded worker on a SQLite file of its own, and prints per mode:
//!
//! - **completed**: tasks that reached `COMPLETED`;
//! - **all cited**: answers in which every sentence that states something carries a
//!   citation (and there is at least one such sentence);
//! - **supported**: answers with at least one citation, each naming evidence that supports
//!   its sentence by the lexical check of `worker::research::grounding` (the cited passage holds half
//!   the sentence's content words or more);
//! - **expected**: answers holding at least half the content words of an answering text;
//! - **evidence recall**: tasks whose evidence has a passage of an answering document
//!   holding at least half the answering text's content words;
//! - **rounds**: retrieving stages per task; **calls**: model calls per task (from `cost`);
//!   **s/task**: seconds from create to the end.
//!
//! With `KFS_BENCH_OPENAI_BASE_URL` (and `KFS_BENCH_OPENAI_MODEL`, else the endpoint's first
//! model; `KFS_BENCH_OPENAI_API_KEY` if it wants one) the `openai` engine answers, at a
//! price of 0; without it, the built-in engine. `KFS_BENCH_RERANK_BASE_URL` (with
//! `KFS_BENCH_RERANK_MODEL`, `KFS_BENCH_RERANK_API_KEY`) adds a reranker.
//! `../shared/tools/llm-server PORT` serves a real 135M-parameter model for it:
//! `KFS_BENCH_OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 cargo bench -p workspace-tests --bench answers`.
use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use entity::MediaType;
use kfs_tests::retrieval_eval::{self, Question};
use kfs_tests::server::{GraphqlClient, TestServer};
use secrecy::SecretString;
use serde_json::{Value, json};
use worker::config::{EngineKind, OpenAiSettings, RerankSettings};
use worker::research::grounding::{content_words, sentences, supports};

fn main() -> ExitCode {
    kfs_tests::bench::main("answers", run)
}

/// The longest a task may take before the bench gives up on it.
const TASK_TIMEOUT: Duration = Duration::from_secs(900);

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.trim().is_empty())
}

fn run() -> anyhow::Result<()> {
    let count = usize::try_from(kfs_tests::bench::env_number("KFS_BENCH_QUESTIONS", 8)?)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // A database file of its own, not a test database: a weak model on two cores takes
    // longer than a test's deadline.
    let path = std::env::temp_dir().join(format!("kfs-answers-{}.sqlite", uuid::Uuid::new_v4().simple()));
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let outcome = runtime.block_on(bench(&url, count));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    outcome
}

async fn bench(database_url: &str, count: usize) -> anyhow::Result<()> {
    let openai = match env("KFS_BENCH_OPENAI_BASE_URL") {
        Some(base_url) => Some(openai_settings(base_url).await?),
        None => None,
    };
    let rerank = env("KFS_BENCH_RERANK_BASE_URL").map(|base_url| RerankSettings {
        base_url: Some(base_url),
        model: env("KFS_BENCH_RERANK_MODEL"),
        api_key: env("KFS_BENCH_RERANK_API_KEY").map(SecretString::from),
        ..RerankSettings::default()
    });
    let engine = match &openai {
        Some(settings) => format!("openai ({})", settings.model.as_deref().unwrap_or("?")),
        None => "builtin".to_owned(),
    };
    let server = TestServer::start_with(database_url, |settings| {
        settings.embedded_worker = true;
        settings.worker.poll_interval_ms = 100;
        if let Some(openai) = openai {
            settings.worker.engine.kind = EngineKind::Openai;
            settings.worker.openai = openai;
        }
        if let Some(rerank) = rerank {
            settings.worker.rerank = rerank;
        }
    })
    .await?;
    let corpus = retrieval_eval::corpus()?;
    let tenant = format!("tenant-{}", uuid::Uuid::new_v4().simple());
    let client = GraphqlClient::new(server.graphql_url(), TestServer::token("bench", &tenant));
    let space = client.run("mutation { createKnowledgeSpace(input: { name: \"Answers\" }) { id } }", json!({})).await?;
    let space = space["createKnowledgeSpace"]["id"].as_str().context("no space")?.to_owned();
    let mut keys = HashMap::new();
    for document in &corpus.documents {
        let media_type = match document.media_type {
            MediaType::TextMarkdown => "TEXT_MARKDOWN",
            MediaType::TextHtml => "TEXT_HTML",
            _ => "TEXT_PLAIN",
        };
        let input = json!({ "knowledgeSpaceId": space, "title": document.title, "mediaType": media_type, "content": document.content });
        let added = client
            .run(
                "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }",
                json!({ "input": input }),
            )
            .await?;
        keys.insert(
            added["addKnowledgeDocument"]["id"].as_str().context("no document id")?.to_owned(),
            document.key.clone(),
        );
    }
    let questions: Vec<&Question> = corpus.questions.iter().take(count).collect();
    println!(
        "answers: {} questions, engine {engine}, {} documents; support: a cited passage holds half its sentence's content words",
        questions.len(),
        corpus.documents.len()
    );
    println!("(own words: no extractive fallback; clean: no markup, heading breadcrumb or title-only sentence)");
    println!(
        "{:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
        "mode",
        "completed",
        "all cited",
        "supported",
        "expected",
        "ev.recall",
        "own words",
        "clean",
        "rounds",
        "calls",
        "s/task"
    );
    // `KFS_BENCH_MODES` (comma-separated) runs fewer modes.
    let modes = env("KFS_BENCH_MODES").unwrap_or_else(|| "FAST,RESEARCH,DEEP".to_owned());
    for mode in modes.split(',').map(str::trim).filter(|mode| !mode.is_empty()) {
        let mut score = Score::default();
        for question in &questions {
            let started = Instant::now();
            let outcome = run_task(&client, &space, mode, &question.query).await?;
            score.add(&outcome, question, &keys, started.elapsed());
        }
        score.print(mode, questions.len());
    }
    server.stop().await;
    Ok(())
}

/// The `openai` settings for the bench's endpoint, at a price of 0.
async fn openai_settings(base_url: String) -> anyhow::Result<OpenAiSettings> {
    let base_url = base_url.trim_end_matches('/').to_owned();
    let api_key = env("KFS_BENCH_OPENAI_API_KEY");
    let model = match env("KFS_BENCH_OPENAI_MODEL") {
        Some(model) => model,
        None => {
            let mut request = reqwest::Client::new().get(format!("{base_url}/models"));
            if let Some(key) = &api_key {
                request = request.bearer_auth(key);
            }
            let models: Value = request.send().await?.error_for_status()?.json().await?;
            models["data"][0]["id"]
                .as_str()
                .context("the endpoint lists no model; set KFS_BENCH_OPENAI_MODEL")?
                .to_owned()
        }
    };
    Ok(OpenAiSettings {
        base_url: Some(base_url),
        model: Some(model),
        api_key: api_key.map(SecretString::from),
        input_usd_per_1m: Some(0.0),
        output_usd_per_1m: Some(0.0),
        timeout_ms: 300_000,
        ..OpenAiSettings::default()
    })
}

/// What one task ended with.
struct Outcome {
    stage: String,
    answer: String,
    evidence: Vec<Value>,
    checks: Vec<Value>,
    rounds: usize,
    calls: usize,
}

async fn run_task(client: &GraphqlClient, space: &str, mode: &str, query: &str) -> anyhow::Result<Outcome> {
    let input =
        json!({ "knowledgeSpaceId": space, "query": query, "mode": mode, "topK": 5, "budgetUsd": 10, "limits": {} });
    let created = client
        .run(
            "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }",
            json!({ "input": input }),
        )
        .await?;
    let id = created["createResearchTask"]["id"].as_str().context("no task id")?.to_owned();
    let read = "query($id: UUID!) { researchTask(id: $id) { stage cost answerTrace { answer evidence citationChecks } \
                progressEvents(first: 100) { eventType stage } } }";
    let deadline = Instant::now() + TASK_TIMEOUT;
    loop {
        let task = client.run(read, json!({ "id": id })).await?["researchTask"].clone();
        let stage = task["stage"].as_str().unwrap_or_default().to_owned();
        if matches!(stage.as_str(), "COMPLETED" | "FAILED" | "CANCELED") {
            let rounds = task["progressEvents"]
                .as_array()
                .map_or(0, |events| events.iter().filter(|event| event["stage"] == "RETRIEVING").count());
            let calls = task["cost"]["stages"]
                .as_object()
                .map_or(0, |stages| stages.values().map(|stage| stage["calls"].as_array().map_or(0, Vec::len)).sum());
            return Ok(Outcome {
                stage,
                answer: task["answerTrace"]["answer"].as_str().unwrap_or_default().to_owned(),
                evidence: task["answerTrace"]["evidence"].as_array().cloned().unwrap_or_default(),
                checks: task["answerTrace"]["citationChecks"].as_array().cloned().unwrap_or_default(),
                rounds,
                calls,
            });
        }
        anyhow::ensure!(Instant::now() < deadline, "task {id} did not end within {TASK_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether `answer` holds no markup (an HTML comment or tag, a Markdown link target) and
/// no sentence that is only a title or heading path of its evidence (`cluster — Cluster ›
/// How it works`).
fn is_clean(answer: &str, evidence: &[Value]) -> bool {
    let markup = ["<!--", "-->", "</", "<strong", "<a ", "<code", "<span", "](", "{#"];
    if markup.iter().any(|mark| answer.contains(mark)) {
        return false;
    }
    let normal = |text: &str| content_words(text).join(" ");
    let mut labels: Vec<String> = Vec::new();
    for item in evidence {
        labels.extend(item["title"].as_str().map(normal));
        for heading in item["heading_path"].as_array().into_iter().flatten() {
            labels.extend(heading.as_str().map(normal));
        }
    }
    labels.retain(|label| !label.is_empty());
    sentences(answer).iter().all(|sentence| {
        let prose = sentence.text.split('[').next().unwrap_or_default();
        let parts: Vec<String> =
            prose.split(['›', '»', '—', '–', '|', ':']).map(normal).filter(|part| !part.is_empty()).collect();
        parts.is_empty() || !parts.iter().all(|part| labels.contains(part))
    })
}

/// The share of `expected`'s content words that `text` holds.
fn coverage(expected: &str, text: &str) -> f64 {
    let wanted = content_words(expected);
    let held = content_words(text);
    wanted.iter().filter(|word| held.contains(word)).count() as f64 / wanted.len().max(1) as f64
}

#[derive(Default)]
struct Score {
    completed: usize,
    all_cited: usize,
    supported: usize,
    expected: usize,
    evidence_recall: usize,
    own_words: usize,
    clean: usize,
    rounds: usize,
    calls: usize,
    seconds: f64,
}

impl Score {
    fn add(&mut self, outcome: &Outcome, question: &Question, keys: &HashMap<String, String>, took: Duration) {
        self.seconds += took.as_secs_f64();
        self.rounds += outcome.rounds;
        self.calls += outcome.calls;
        if outcome.stage != "COMPLETED" {
            return;
        }
        self.completed += 1;
        let cut = sentences(&outcome.answer);
        let stating: Vec<_> = cut.iter().filter(|sentence| sentence.states_something()).collect();
        if !stating.is_empty() && stating.iter().all(|sentence| !sentence.citations.is_empty()) {
            self.all_cited += 1;
        }
        let passage = |number: usize| {
            outcome
                .evidence
                .iter()
                .find(|item| item["citation"] == json!(number))
                .and_then(|item| item["text"].as_str())
        };
        let cited: Vec<(&worker::research::grounding::Sentence, usize)> =
            cut.iter().flat_map(|sentence| sentence.citations.iter().map(move |number| (sentence, *number))).collect();
        if !cited.is_empty()
            && cited.iter().all(|(sentence, number)| passage(*number).is_some_and(|text| supports(sentence, text)))
        {
            self.supported += 1;
        }
        if question.answers.iter().any(|answer| coverage(&answer.contains, &outcome.answer) >= 0.5) {
            self.expected += 1;
        }
        let found = outcome.evidence.iter().any(|item| {
            let document = item["document_id"].as_str().and_then(|id| keys.get(id));
            question.answers.iter().any(|answer| {
                document == Some(&answer.document)
                    && item["text"].as_str().is_some_and(|text| coverage(&answer.contains, text) >= 0.5)
            })
        });
        if found {
            self.evidence_recall += 1;
        }
        if !outcome.checks.iter().any(|check| check["verdict"] == "extractive_fallback") {
            self.own_words += 1;
        }
        if is_clean(&outcome.answer, &outcome.evidence) {
            self.clean += 1;
        }
    }

    fn print(&self, mode: &str, tasks: usize) {
        let per = |total: usize| total as f64 / tasks.max(1) as f64;
        println!(
            "{mode:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7.1} {:>7.1} {:>7.1}",
            format!("{}/{tasks}", self.completed),
            format!("{}/{tasks}", self.all_cited),
            format!("{}/{tasks}", self.supported),
            format!("{}/{tasks}", self.expected),
            format!("{}/{tasks}", self.evidence_recall),
            format!("{}/{tasks}", self.own_words),
            format!("{}/{tasks}", self.clean),
            per(self.rounds),
            per(self.calls),
            self.seconds / tasks.max(1) as f64
        );
    }
}
