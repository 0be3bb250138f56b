//! Follow-ups on a thread: each turn after the first is researched as a standalone query
//! made at planning (the built-in engine adds the previous question's search terms; the
//! `openai` engine asks the model, shown the earlier turns), recorded as
//! `standalone_query` beside the plan; the first turn has none. Earlier turns the caller
//! can no longer read are not shown.
use anyhow::{Context as _, ensure};
use entity::research_task_progress_event as progress;
use kfs_tests::openai_server::{OpenAiServer, Reply};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_support::string_at;
use crate::research_openai::{create, space_with_documents, trace, wait_terminal};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        the_builtin_engine_researches_a_follow_up_with_the_previous_questions_terms,
        the_model_rewrites_a_follow_up_from_the_earlier_turns,
        a_threads_events_arrive_turn_after_turn_resume_from_a_cursor_and_end_with_it,
    ]
}

const CREATE_THREAD: &str =
    "mutation($space: UUID!) { createResearchThread(input: {knowledgeSpaceId: $space}) { id } }";

/// The payload of the event that ended planning.
async fn planned(db: &TestDb, task: &str) -> anyhow::Result<Value> {
    let row = progress::Entity::find()
        .filter(progress::Column::ResearchTaskJobId.eq(task.parse::<Uuid>()?))
        .filter(progress::Column::IdempotencyKey.eq("stage:retrieving"))
        .one(&db.db)
        .await?
        .context("no event ended planning")?;
    Ok(row.payload)
}

async fn the_builtin_engine_researches_a_follow_up_with_the_previous_questions_terms(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.poll_interval_ms = 100;
    })
    .await?;
    let (space, token) = space_with_documents(&api).await?;
    let thread = string_at(
        &api.data(Some(&token), CREATE_THREAD, json!({ "space": space })).await?,
        "/createResearchThread/id",
    )?;
    let turn = |query: &'static str| {
        let (api, token, space, thread) = (&api, &token, &space, &thread);
        async move { create(api, token, space, query, json!({ "mode": "FAST", "threadId": thread })).await }
    };
    let mut shown = Vec::new();
    for query in ["How do bees make honey?", "Where do they keep it?", "And what is that made of?"] {
        let task = turn(query).await?;
        let row = wait_terminal(&db, &task).await?;
        ensure_eq!(row.stage, entity::Stage::Completed, "{:?}", row.error);
        let payload = planned(&db, &task).await?;
        let answer = trace(&api, &token, &task).await?["answerTrace"]["answer"].clone();
        shown.push((query, payload, answer));
    }
    let (_, first, _) = &shown[0];
    ensure!(first.get("standalone_query").is_none(), "a first turn is researched as asked: {first}");
    let (_, second, answer) = &shown[1];
    let standalone = second["standalone_query"].as_str().context("a follow-up's standalone query")?;
    ensure!(standalone.starts_with("Where do they keep it?"), "{standalone}");
    ensure!(standalone.contains("bees") && standalone.contains("honey"), "the previous question's terms: {standalone}");
    ensure_eq!(second["plan"]["sub_queries"][0], json!(standalone), "planned from it: {second}");
    ensure!(
        answer.as_str().is_some_and(|answer| answer.contains("wax combs")),
        "the follow-up found its answer: {answer}"
    );
    let (_, third, _) = &shown[2];
    let standalone = third["standalone_query"].as_str().context("the third turn's standalone query")?;
    ensure!(standalone.contains("keep"), "the previous turn's question as asked: {standalone}");
    println!("three turns: {shown:#?}");
    api.stop().await;
    Ok(())
}

async fn the_model_rewrites_a_follow_up_from_the_earlier_turns(db: TestDb) -> anyhow::Result<()> {
    let server = OpenAiServer::start().await?;
    let api = crate::research_openai::api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let thread = string_at(
        &api.data(Some(&token), CREATE_THREAD, json!({ "space": space })).await?,
        "/createResearchThread/id",
    )?;
    let extra = json!({ "mode": "FAST", "threadId": thread });
    server.then([Reply::answer("Bees make honey from nectar [1].")]);
    let first = create(&api, &token, &space, "How do bees make honey?", extra.clone()).await?;
    ensure_eq!(wait_terminal(&db, &first).await?.stage, entity::Stage::Completed);
    let before = server.seen().len();
    server.then([Reply::answer("Where do bees keep honey?"), Reply::answer("Bees store honey in wax combs [1].")]);
    let second = create(&api, &token, &space, "Where do they keep it?", extra).await?;
    let row = wait_terminal(&db, &second).await?;
    ensure_eq!(row.stage, entity::Stage::Completed, "{:?}", row.error);
    let payload = planned(&db, &second).await?;
    ensure_eq!(payload["standalone_query"], json!("Where do bees keep honey?"), "{payload}");
    ensure_eq!(payload["plan"]["sub_queries"], json!(["Where do bees keep honey?"]));
    ensure_eq!(payload["engine"]["rewrite"]["rewriter"], json!("model"), "{payload}");
    let seen = server.seen();
    let rewrite = &seen.get(before).context("the rewrite request")?.body;
    let shown = rewrite["messages"].to_string();
    ensure!(
        shown.contains("How do bees make honey?") && shown.contains("Bees make honey from nectar"),
        "the model sees the earlier question and answer: {shown}"
    );
    let answer_request = seen.get(before + 1).context("the answer request")?.body["messages"].to_string();
    ensure!(
        answer_request.contains("Where do bees keep honey?"),
        "answered from the standalone query: {answer_request}"
    );
    ensure!(answer_request.contains("Earlier in this conversation"), "with the conversation: {answer_request}");
    let read = trace(&api, &token, &second).await?;
    ensure_eq!(read["answerTrace"]["answer"], json!("Bees store honey in wax combs [1]."));
    ensure!(
        row.cost["stages"]["planning"]["usd_nanos"].as_i64().is_some_and(|nanos| nanos > 0),
        "the rewrite is paid for: {}",
        row.cost
    );

    // A weak model that answers instead of rewriting (the 135M model repeats the earlier
    // answer) drops the follow-up's words: the built-in rewrite is used, and says why.
    server.then([Reply::answer("Bees store honey in wax combs."), Reply::answer("Honey is sticky [1].")]);
    let third = create(&api, &token, &space, "Is it sticky?", json!({ "mode": "FAST", "threadId": thread })).await?;
    ensure_eq!(wait_terminal(&db, &third).await?.stage, entity::Stage::Completed);
    let payload = planned(&db, &third).await?;
    ensure_eq!(payload["engine"]["rewrite"]["rewriter"], json!("builtin"), "{payload}");
    ensure_eq!(payload["engine"]["rewrite"]["reason"], json!("the reply dropped the follow-up's words"));
    let standalone = payload["standalone_query"].as_str().unwrap_or_default();
    ensure!(standalone.starts_with("Is it sticky?") && standalone.contains("keep"), "{standalone}");
    api.stop().await;
    Ok(())
}

const THREAD_EVENTS: &str = "subscription($thread: UUID!, $after: String) { researchThreadEvents(threadId: $thread, \
    afterCursor: $after) { cursor taskId event { sequence eventType stage } } }";

/// The code of the error a subscription is refused with at its start (an `error` message,
/// or a `next` carrying only errors, as GraphQL over WebSocket allows both).
async fn refusal(client: &mut kfs_tests::ws::WsClient) -> anyhow::Result<String> {
    use kfs_tests::ws::Event;
    let errors = match client.next_event().await? {
        Event::Error(_, payload) => payload,
        Event::Next(_, payload) if payload["data"].is_null() => payload["errors"].clone(),
        other => anyhow::bail!("expected a refusal, got {other:?}"),
    };
    Ok(errors[0]["extensions"]["code"].as_str().unwrap_or_default().to_owned())
}

/// Reads `id`'s `next` payloads until `done` says enough.
async fn read_until(
    client: &mut kfs_tests::ws::WsClient,
    id: &str,
    mut done: impl FnMut(&[Value]) -> bool,
) -> anyhow::Result<Vec<Value>> {
    use kfs_tests::ws::Event;
    let mut seen = Vec::new();
    while !done(&seen) {
        match client.next_event().await? {
            Event::Next(at, payload) if at == id => seen.push(payload["data"]["researchThreadEvents"].clone()),
            other => anyhow::bail!("while reading {id}: {other:?} after {seen:?}"),
        }
    }
    Ok(seen)
}

async fn a_threads_events_arrive_turn_after_turn_resume_from_a_cursor_and_end_with_it(
    db: TestDb,
) -> anyhow::Result<()> {
    use kfs_tests::ws::{Event, WsClient};
    let api = crate::live_support::api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.poll_interval_ms = 100;
    })
    .await?;
    let (space, token) = space_with_documents(&api).await?;
    let thread = string_at(
        &api.data(Some(&token), CREATE_THREAD, json!({ "space": space })).await?,
        "/createResearchThread/id",
    )?;
    let mut client = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    // Subscribed before any turn: it waits for the first.
    client.subscribe("t", THREAD_EVENTS, json!({ "thread": thread })).await?;
    let extra = json!({ "mode": "FAST", "threadId": thread });
    let first = create(&api, &token, &space, "How do bees make honey?", extra.clone()).await?;
    let second = create(&api, &token, &space, "Where do they keep it?", extra).await?;
    let completed = |events: &[Value], task: &str| {
        events.iter().any(|event| event["taskId"] == json!(task) && event["event"]["stage"] == "COMPLETED")
    };
    let events = read_until(&mut client, "t", |events| completed(events, &second)).await?;
    let tasks: Vec<&Value> = events.iter().map(|event| &event["taskId"]).collect();
    let switch = tasks.iter().position(|task| **task == json!(second)).context("the second turn's events")?;
    ensure!(tasks[..switch].iter().all(|task| **task == json!(first)), "the first turn's events first: {tasks:?}");
    ensure!(completed(&events[..switch], &first), "the first turn ends before the second begins");
    for task in [&first, &second] {
        let sequences: Vec<i64> = events
            .iter()
            .filter(|event| event["taskId"] == json!(task))
            .filter_map(|event| event["event"]["sequence"].as_i64())
            .collect();
        ensure_eq!(sequences, (1..=sequences.len() as i64).collect::<Vec<_>>(), "gapless for {task}");
    }
    // Resumed from a cursor inside the first turn: exactly the rest, in order.
    let at = 2.min(switch - 1);
    let mut resumed = WsClient::connect_and_init(&api.server.ws_url(), Some(&token)).await?;
    resumed.subscribe("r", THREAD_EVENTS, json!({ "thread": thread, "after": events[at]["cursor"] })).await?;
    let rest = read_until(&mut resumed, "r", |seen| seen.len() == events.len() - at - 1).await?;
    let expected: Vec<Value> = events[at + 1..].iter().map(|event| event["event"].clone()).collect();
    let got: Vec<Value> = rest.iter().map(|event| event["event"].clone()).collect();
    ensure_eq!(got, expected, "the rest after the cursor");
    // A bad cursor is refused; another's thread is NOT_FOUND.
    resumed.subscribe("bad", THREAD_EVENTS, json!({ "thread": thread, "after": "nope" })).await?;
    ensure_eq!(refusal(&mut resumed).await?, "BAD_USER_INPUT");
    let mut stranger = WsClient::connect_and_init(&api.server.ws_url(), Some(&api.token("mallory"))).await?;
    stranger.subscribe("x", THREAD_EVENTS, json!({ "thread": thread })).await?;
    ensure_eq!(refusal(&mut stranger).await?, "NOT_FOUND");
    // Deleting the thread completes the open stream.
    let delete = "mutation($id: UUID!) { deleteResearchThread(id: $id) }";
    api.data(Some(&token), delete, json!({ "id": thread })).await?;
    loop {
        match client.next_event().await? {
            Event::Complete(id) if id == "t" => break,
            Event::Next(id, _) if id == "t" => {}
            other => anyhow::bail!("expected the stream to complete, got {other:?}"),
        }
    }
    api.stop().await;
    Ok(())
}
