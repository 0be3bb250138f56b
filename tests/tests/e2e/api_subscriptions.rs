//! Subscriptions over the server's own schema and state: replay from the database after
//! `afterSequence`, then live rows in order without gaps or duplicates, ending after the
//! terminal event. (The WebSocket transport is covered with the server's tests.)
use std::time::Duration;

use anyhow::{Context, anyhow, ensure};
use api::graphql::{AppSchema, Request, build_schema};
use entity::AccessChannel;
use futures_util::{Stream, StreamExt};
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};
use worker::app::Principal;

use crate::api_support::{Api, CANCEL, PAUSE, RESUME};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        progress_replays_then_follows_live_and_ends_after_the_terminal_event,
        another_subject_subscribing_gets_not_found,
    ]
}

/// How long one event may take to arrive before the test fails instead of hanging.
const EVENT_DEADLINE: Duration = Duration::from_secs(10);

fn principal(api: &Api, subject: &str) -> Principal {
    Principal {
        tenant_id: api.tenant.clone(),
        subject_id: subject.to_owned(),
        channel: AccessChannel::Interactive,
        api_key: None,
        expires_at: None,
        issuer: None,
    }
}

fn progress(
    schema: &AppSchema,
    caller: Principal,
    task: &Value,
    after: i32,
) -> impl Stream<Item = api::graphql::Response> + use<> {
    let query = format!(
        "subscription {{ researchTaskProgress(taskId: \"{}\", afterSequence: {after}) {{ sequence eventType stage }} }}",
        task["id"].as_str().unwrap_or_default()
    );
    schema.execute_stream(Request::new(query).data(caller))
}

/// The next response as JSON, or `None` when the stream ended.
async fn next(stream: &mut (impl Stream<Item = api::graphql::Response> + Unpin)) -> anyhow::Result<Option<Value>> {
    let response = tokio::time::timeout(EVENT_DEADLINE, stream.next()).await.context("no event before the deadline")?;
    response.map(|response| serde_json::to_value(response).map_err(|error| anyhow!(error))).transpose()
}

async fn progress_replays_then_follows_live_and_ends_after_the_terminal_event(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let schema = build_schema(api.server.server.state.clone());
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let task = api.task(&token, &space).await?;
    let id = json!({ "id": task["id"] });
    api.data(Some(&token), PAUSE, id.clone()).await?;

    let mut live = Box::pin(progress(&schema, principal(&api, "alice"), &task, 0));
    let replayed = next(&mut live).await?;
    ensure!(
        replayed
            == Some(
                json!({ "data": { "researchTaskProgress": { "sequence": 1, "eventType": "PAUSED", "stage": "PAUSED" } } })
            ),
        "{replayed:?}"
    );
    api.data(Some(&token), RESUME, id.clone()).await?;
    api.data(Some(&token), CANCEL, id).await?;
    let mut sequences = Vec::new();
    while let Some(response) = next(&mut live).await? {
        ensure!(response.get("errors").is_none(), "{response}");
        sequences.push(response["data"]["researchTaskProgress"]["sequence"].clone());
    }
    ensure!(sequences == [json!(2), json!(3)], "{sequences:?}");

    let mut late = Box::pin(progress(&schema, principal(&api, "alice"), &task, 2));
    let only = next(&mut late).await?;
    ensure!(
        only.as_ref().and_then(|value| value.pointer("/data/researchTaskProgress/eventType"))
            == Some(&json!("CANCELED")),
        "{only:?}"
    );
    ensure!(next(&mut late).await?.is_none(), "the feed should end after the terminal event");
    api.stop().await;
    Ok(())
}

async fn another_subject_subscribing_gets_not_found(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let schema = build_schema(api.server.server.state.clone());
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "OWNER").await?;
    let task = api.task(&api.token("alice"), &space).await?;
    let mut theirs = Box::pin(progress(&schema, principal(&api, "bob"), &task, 0));
    let answer = next(&mut theirs).await?.unwrap_or_default();
    ensure!(answer.pointer("/errors/0/extensions/code") == Some(&json!("NOT_FOUND")), "{answer}");
    api.stop().await;
    Ok(())
}
