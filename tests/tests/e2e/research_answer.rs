//! `researchTaskAnswer` over real WebSocket connections: the answer streams as the model
//! writes it; early, late and reconnecting subscribers see no gap and no duplicate; a
//! restarted generation resets the stream; the last message (`done`) comes with the
//! committed trace and the deltas since the last reset concatenate exactly to its answer; a
//! failed task ends the stream without `done`; and all of it works across processes.
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kfs_tests::openai_server::{Answer, OpenAiServer, Reply};
use kfs_tests::process::{ApiProcess, Binaries, Process, api_command, command};
use kfs_tests::server::{GraphqlClient, TestServer};
use kfs_tests::ws::{Event, WsClient};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_support::string_at;
use crate::research_openai::{DOCUMENTS, KEY, MODEL, api, create, space_with_documents, trace, wait_terminal};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        early_late_and_reconnecting_subscribers_each_get_the_whole_answer_once,
        a_restarted_generation_resets_the_stream,
        a_task_that_fails_ends_the_stream_without_done,
        only_the_tasks_owner_may_follow_its_answer,
        the_builtin_engine_streams_its_answer_too;
        postgres_only: the_answer_streams_from_a_worker_process_to_another_api_process,
    ]
}

/// `researchTaskAnswer` after `$after`.
const ANSWER: &str = "subscription($task: UUID!, $after: Int) { \
    researchTaskAnswer(taskId: $task, afterOffset: $after) { offset text done reset } }";

/// The deltas of one subscription, as received.
#[derive(Debug, Default)]
struct Deltas(Vec<Value>);

impl Deltas {
    /// Checks the stream's own rule (each delta starts where the text so far ends, a reset
    /// starts over at 0) and returns the text since the last reset, starting at `from`.
    fn text(&self, from: i64) -> anyhow::Result<String> {
        let mut text = String::new();
        let mut at = from;
        for delta in &self.0 {
            if delta["reset"] == json!(true) {
                ensure_eq!(delta["offset"], json!(0), "a reset starts at 0: {:?}", self.0);
                text.clear();
                at = 0;
            }
            ensure_eq!(delta["offset"].as_i64(), Some(at), "no gap, no overlap: {:?}", self.0);
            let piece = delta["text"].as_str().context("text")?;
            text.push_str(piece);
            at += piece.chars().count() as i64;
        }
        Ok(text)
    }

    fn done(&self) -> bool {
        self.0.last().is_some_and(|delta| delta["done"] == json!(true))
    }

    fn resets(&self) -> usize {
        self.0.iter().filter(|delta| delta["reset"] == json!(true)).count()
    }
}

/// Reads the subscription `id` until it completes, at most `limit` deltas (then stops).
async fn read(client: &mut WsClient, id: &str, limit: usize) -> anyhow::Result<(Deltas, bool)> {
    let mut deltas = Deltas::default();
    loop {
        if deltas.0.len() == limit {
            return Ok((deltas, false));
        }
        match tokio::time::timeout(Duration::from_secs(60), client.next_event()).await.context("no message")?? {
            Event::Next(from, payload) if from == id => {
                ensure!(payload.get("errors").is_none(), "{payload}");
                deltas.0.push(payload["data"]["researchTaskAnswer"].clone());
            }
            Event::Complete(from) if from == id => return Ok((deltas, true)),
            other => bail!("while reading {id}: {other:?}"),
        }
    }
}

async fn early_late_and_reconnecting_subscribers_each_get_the_whole_answer_once(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    // Long enough to stream in many deltas; every claim different and supported, so
    // grounding keeps the text as it streamed.
    let written = "Bees make honey from nectar, which worker bees thicken with enzymes [1]. They keep it in wax combs [2]. \
                   Worker bees fan the nectar with their wings [1]. The wax comes from glands on worker bees [2]. \
                   Worker bees add enzymes to the nectar [1]. Bees store honey in wax combs [2]. ";
    let slow = Answer::new(written).chunked(6).slow(Duration::from_millis(30));
    server.then([Reply::Answer(slow)]);
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST" })).await?;
    let url = api.server.ws_url();

    let mut early = WsClient::connect_and_init(&url, Some(&token)).await?;
    early.subscribe("early", ANSWER, json!({ "task": task })).await?;
    // A few deltas in, a second subscriber joins and a third leaves to come back.
    let (first, _) = read(&mut early, "early", 2).await?;
    let mut late = WsClient::connect_and_init(&url, Some(&token)).await?;
    late.subscribe("late", ANSWER, json!({ "task": task })).await?;
    let mut leaving = WsClient::connect_and_init(&url, Some(&token)).await?;
    leaving.subscribe("leaving", ANSWER, json!({ "task": task })).await?;
    let (before, _) = read(&mut leaving, "leaving", 1).await?;
    let had = before.text(0)?;
    leaving.close().await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut back = WsClient::connect_and_init(&url, Some(&token)).await?;
    let offset = had.chars().count() as i64;
    back.subscribe("back", ANSWER, json!({ "task": task, "after": offset })).await?;

    let (rest, completed) = read(&mut early, "early", usize::MAX).await?;
    ensure!(completed);
    let early_deltas = Deltas(first.0.into_iter().chain(rest.0).collect());
    let (late_deltas, late_completed) = read(&mut late, "late", usize::MAX).await?;
    let (back_deltas, back_completed) = read(&mut back, "back", usize::MAX).await?;
    ensure!(late_completed && back_completed);

    let stored = trace(&api, &token, &task).await?["answerTrace"]["answer"].as_str().context("no answer")?.to_owned();
    ensure!(stored.contains("[1]") && stored.contains("[2]"), "{stored}");
    for (name, deltas, from, prefix) in
        [("early", &early_deltas, 0, ""), ("late", &late_deltas, 0, ""), ("back", &back_deltas, offset, had.as_str())]
    {
        ensure!(deltas.done(), "{name} ended with done: {deltas:?}");
        ensure_eq!(deltas.resets(), 0, "{name}");
        ensure_eq!(format!("{prefix}{}", deltas.text(from)?), stored, "{name}'s deltas are the answer");
    }
    ensure!(early_deltas.0.len() >= 4, "the early subscriber saw it stream: {} deltas", early_deltas.0.len());
    ensure!(early_deltas.0.iter().rev().skip(1).all(|delta| delta["done"] == json!(false)), "done only at the end");

    // After the end: one message with the whole answer, then complete.
    let mut after = WsClient::connect_and_init(&url, Some(&token)).await?;
    after.subscribe("after", ANSWER, json!({ "task": task })).await?;
    let (once, completed) = read(&mut after, "after", usize::MAX).await?;
    ensure!(completed && once.0.len() == 1 && once.done(), "{once:?}");
    ensure_eq!(once.text(0)?, stored);
    // An offset past anything written: the whole answer, as a reset, then complete.
    let mut far = WsClient::connect_and_init(&url, Some(&token)).await?;
    far.subscribe("far", ANSWER, json!({ "task": task, "after": i32::MAX })).await?;
    let (beyond, completed) = read(&mut far, "far", usize::MAX).await?;
    ensure!(completed && beyond.0.len() == 1 && beyond.done() && beyond.resets() == 1, "{beyond:?}");
    ensure_eq!(beyond.text(0)?, stored);
    api.stop().await;
    Ok(())
}

async fn a_restarted_generation_resets_the_stream(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    server
        .then([Reply::Cut { content: "An answer cut short that no one may keep [1] because".into(), after_chars: 40 }]);
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    // The answer's request waits until the subscription is in place, however slowly this
    // machine runs, so the cut draft is there to be seen.
    server.hold();
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST" })).await?;
    client.subscribe("answer", ANSWER, json!({ "task": task })).await?;
    server.wait_for_requests(1, std::time::Duration::from_secs(30)).await?;
    server.release();
    let (deltas, completed) = read(&mut client, "answer", usize::MAX).await?;
    ensure!(completed && deltas.done(), "{deltas:?}");
    let stored = trace(&api, &token, &task).await?["answerTrace"]["answer"].as_str().context("answer")?.to_owned();
    ensure_eq!(deltas.text(0)?, stored);
    ensure!(!stored.contains("cut short"), "{stored}");
    // The cut text was shown (the draft is written as soon as text arrives, and the retry
    // waits its backoff), so starting over is announced.
    ensure!(deltas.resets() >= 1, "a reset after the cut: {deltas:?}");
    api.stop().await;
    Ok(())
}

async fn a_task_that_fails_ends_the_stream_without_done(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    server.then([Reply::model_not_found(MODEL)]);
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST" })).await?;
    client.subscribe("answer", ANSWER, json!({ "task": task })).await?;
    let (deltas, completed) = read(&mut client, "answer", usize::MAX).await?;
    ensure!(completed && !deltas.done(), "{deltas:?}");
    ensure_eq!(wait_terminal(&db, &task).await?.stage, entity::Stage::Failed);
    api.stop().await;
    Ok(())
}

async fn only_the_tasks_owner_may_follow_its_answer(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let task = create(&api, &token, &space, "How do bees make honey?", json!({ "mode": "FAST" })).await?;
    let url = api.server.ws_url();
    let refused = async |bearer: &str, variables: Value| -> anyhow::Result<String> {
        let mut client = WsClient::connect_and_init(&url, Some(bearer)).await?;
        client.subscribe("answer", ANSWER, variables).await?;
        crate::live_support::refused_on_socket(&mut client, "answer").await
    };
    let mallory = api.token("mallory");
    ensure_eq!(refused(&mallory, json!({ "task": task })).await?, "NOT_FOUND");
    ensure_eq!(refused(&mallory, json!({ "task": Uuid::new_v4() })).await?, "NOT_FOUND", "as for a missing id");
    ensure_eq!(refused(&token, json!({ "task": task, "after": -1 })).await?, "BAD_USER_INPUT");
    // Over HTTP it is refused as every subscription is.
    let (status, _) = api.server.post(Some(&token), ANSWER, json!({ "task": task })).await?;
    ensure!(status < 500, "{status}");
    api.stop().await;
    Ok(())
}

async fn the_builtin_engine_streams_its_answer_too(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.poll_interval_ms = 100;
    })
    .await?;
    let (space, token) = space_with_documents(&api).await?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    let task = create(&api, &token, &space, "How do bees make honey?", json!({})).await?;
    client.subscribe("answer", ANSWER, json!({ "task": task })).await?;
    let (deltas, completed) = read(&mut client, "answer", usize::MAX).await?;
    ensure!(completed && deltas.done(), "{deltas:?}");
    let stored = trace(&api, &token, &task).await?["answerTrace"]["answer"].as_str().context("answer")?.to_owned();
    ensure!(stored.contains("[1]"), "{stored}");
    ensure_eq!(deltas.text(0)?, stored);
    api.stop().await;
    Ok(())
}

async fn the_answer_streams_from_a_worker_process_to_another_api_process(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    server.require_key(KEY);
    server.auto_delay(Duration::from_millis(40));
    let binaries = Binaries::build().await?;
    let api = ApiProcess::start(api_command(&binaries.api, &db.url)).await?;
    let mut worker = command(&binaries.worker);
    worker
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .env("KFS_WORKER_WORKER_ID", "answer-worker")
        .env("KFS_ENGINE", "openai")
        .env("KFS_OPENAI_BASE_URL", server.base_url())
        .env("KFS_OPENAI_API_KEY", KEY)
        .env("KFS_OPENAI_MODEL", MODEL)
        .env("KFS_OPENAI_INPUT_USD_PER_1M", "0.15")
        .env("KFS_OPENAI_OUTPUT_USD_PER_1M", "0.6");
    let mut worker = Process::spawn("worker", worker)?;
    let tenant = format!("tenant-{}", Uuid::new_v4().simple());
    let token = TestServer::token("alice", &tenant);
    let client = GraphqlClient::new(api.graphql_url(), token.clone());
    let space = string_at(
        &client.run("mutation { createKnowledgeSpace(input: {name: \"Bees\"}) { id } }", json!({})).await?,
        "/createKnowledgeSpace/id",
    )?;
    let add = "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }";
    for (title, content) in DOCUMENTS {
        client.run(add, json!({ "input": { "knowledgeSpaceId": space, "title": title, "content": content } })).await?;
    }
    let mut ws = WsClient::connect_and_init(&api.ws_url(), Some(&token)).await?;
    let create = "mutation($s: UUID!) { createResearchTask(input: {knowledgeSpaceId: $s, query: \"How do bees make honey and store it?\", mode: FAST}) { id } }";
    let task = string_at(&client.run(create, json!({ "s": space })).await?, "/createResearchTask/id")?;
    ws.subscribe("answer", ANSWER, json!({ "task": task })).await?;
    let (deltas, completed) = read(&mut ws, "answer", usize::MAX).await?;
    worker.ensure_running()?;
    ensure!(completed && deltas.done(), "{deltas:?}");
    let read = "query($id: UUID!) { researchTask(id: $id) { answerTrace { answer } } }";
    let stored = client.run(read, json!({ "id": task })).await?["researchTask"]["answerTrace"]["answer"]
        .as_str()
        .context("answer")?
        .to_owned();
    ensure_eq!(deltas.text(0)?, stored);
    ensure!(deltas.0.len() >= 3, "streamed in parts across processes, not at the end only: {deltas:?}");
    Ok(())
}
