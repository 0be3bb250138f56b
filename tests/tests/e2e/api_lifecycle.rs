//! Task commands through the API: conditional on `expectedRowVersion`, refused by the stage
//! rule with CONFLICT and the task's current stage, and creation idempotent on the key.
use anyhow::ensure;
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};

use crate::api_support::{Api, CANCEL, CREATE_TASK, PAUSE, RESUME};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_stale_expected_row_version_is_a_conflict_carrying_the_current_stage,
        commands_the_stage_rule_refuses_are_conflicts,
        pause_and_resume_are_journaled_in_sequence_order,
        the_same_idempotency_key_returns_the_same_task_and_other_input_conflicts,
        new_tasks_get_the_configured_number_of_execution_attempts,
    ]
}

/// The first error's extensions.
fn extensions(body: &Value) -> Value {
    body.pointer("/errors/0/extensions").cloned().unwrap_or(Value::Null)
}

async fn a_stale_expected_row_version_is_a_conflict_carrying_the_current_stage(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let task = api.task(&token, &space).await?;
    ensure!(task["rowVersion"] == 1 && task["stage"] == "QUEUED", "{task}");
    let paused = api.data(Some(&token), PAUSE, json!({ "id": task["id"], "v": 1 })).await?;
    ensure!(
        paused["pauseResearchTask"]["stage"] == "PAUSED" && paused["pauseResearchTask"]["rowVersion"] == 2,
        "{paused}"
    );
    ensure!(paused["pauseResearchTask"]["pausedFromStage"] == "QUEUED", "{paused}");

    let stale = api.call(Some(&token), CANCEL, json!({ "id": task["id"], "v": 1 })).await?;
    let found = extensions(&stale);
    ensure!(found == json!({ "code": "CONFLICT", "currentStage": "PAUSED", "rowVersion": 2 }), "{stale}");
    let current = api.data(Some(&token), CANCEL, json!({ "id": task["id"], "v": 2 })).await?;
    ensure!(current["cancelResearchTask"]["stage"] == "CANCELED", "{current}");
    api.stop().await;
    Ok(())
}

async fn commands_the_stage_rule_refuses_are_conflicts(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let task = api.task(&token, &space).await?;
    let id = json!({ "id": task["id"] });
    let queued = api.call(Some(&token), RESUME, id.clone()).await?;
    ensure!(
        extensions(&queued) == json!({ "code": "CONFLICT", "currentStage": "QUEUED", "rowVersion": 1 }),
        "{queued}"
    );
    api.data(Some(&token), CANCEL, id.clone()).await?;
    for command in [PAUSE, RESUME] {
        let refused = api.call(Some(&token), command, id.clone()).await?;
        ensure!(extensions(&refused)["code"] == "CONFLICT", "{refused}");
        ensure!(extensions(&refused)["currentStage"] == "CANCELED", "{refused}");
    }
    // Canceling again is not refused: it answers with the canceled task (hostile_inputs).
    let again = api.data(Some(&token), CANCEL, id.clone()).await?;
    ensure!(again["cancelResearchTask"]["stage"] == "CANCELED", "{again}");
    api.stop().await;
    Ok(())
}

async fn pause_and_resume_are_journaled_in_sequence_order(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let task = api.task(&token, &space).await?;
    let id = json!({ "id": task["id"] });
    api.data(Some(&token), PAUSE, id.clone()).await?;
    let resumed = api.data(Some(&token), RESUME, id.clone()).await?;
    ensure!(resumed["resumeResearchTask"]["stage"] == "QUEUED", "{resumed}");
    let journal = "query($id: UUID!) { researchTask(id: $id) { \
        progressEvents { sequence eventType stage } later: progressEvents(afterSequence: 1) { sequence } } }";
    let read = api.data(Some(&token), journal, id).await?;
    let expected = json!([
        { "sequence": 1, "eventType": "PAUSED", "stage": "PAUSED" },
        { "sequence": 2, "eventType": "RESUMED", "stage": "QUEUED" },
    ]);
    ensure!(read["researchTask"]["progressEvents"] == expected, "{read}");
    ensure!(read["researchTask"]["later"] == json!([{ "sequence": 2 }]), "{read}");
    api.stop().await;
    Ok(())
}

async fn the_same_idempotency_key_returns_the_same_task_and_other_input_conflicts(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let input = |query: &str| {
        json!({ "input": {
        "knowledgeSpaceId": space, "query": query, "idempotencyKey": "k-1", "topK": 3, "metadata": { "a": 1 }
    } })
    };
    let first = api.data(Some(&token), CREATE_TASK, input("q")).await?;
    let again = api.data(Some(&token), CREATE_TASK, input("q")).await?;
    ensure!(first["createResearchTask"]["id"] == again["createResearchTask"]["id"], "{first} {again}");
    ensure!(api.code(Some(&token), CREATE_TASK, input("another question")).await? == "CONFLICT");
    // The key is the caller's own: another member using it gets a task of their own.
    api.member("alice", &space, "bob", "VIEWER").await?;
    let bobs = api.data(Some(&api.token("bob")), CREATE_TASK, input("q")).await?;
    ensure!(bobs["createResearchTask"]["id"] != first["createResearchTask"]["id"], "{bobs}");
    api.stop().await;
    Ok(())
}

/// `default_max_execution_attempts` of the worker settings (`KFS_WORKER_DEFAULT_MAX_EXECUTION_ATTEMPTS`)
/// is what the API stamps on new tasks.
async fn new_tasks_get_the_configured_number_of_execution_attempts(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| settings.worker.default_max_execution_attempts = 7).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let task = api.task(&token, &space).await?;
    let read = "query($id: UUID!) { researchTask(id: $id) { maxExecutionAttempts executionAttempts } }";
    let data = api.data(Some(&token), read, json!({ "id": task["id"] })).await?;
    ensure!(data["researchTask"] == json!({ "maxExecutionAttempts": 7, "executionAttempts": 0 }), "{data}");
    api.stop().await;
    Ok(())
}
