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
    server.then([Reply::answer("Where do bees store honey?"), Reply::answer("Bees store honey in wax combs [1].")]);
    let second = create(&api, &token, &space, "Where do they keep it?", extra).await?;
    let row = wait_terminal(&db, &second).await?;
    ensure_eq!(row.stage, entity::Stage::Completed, "{:?}", row.error);
    let payload = planned(&db, &second).await?;
    ensure_eq!(payload["standalone_query"], json!("Where do bees store honey?"), "{payload}");
    ensure_eq!(payload["plan"]["sub_queries"], json!(["Where do bees store honey?"]));
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
        answer_request.contains("Where do bees store honey?"),
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
    api.stop().await;
    Ok(())
}
