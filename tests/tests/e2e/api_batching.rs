//! Nested fields of lists are loaded in batches (one statement per kind for the whole
//! page); what they answer must be exactly what each task's own read answers, arguments
//! (`afterSequence`, `first`) included, and a trace only where the task's subject owns it.
use std::time::Duration;

use anyhow::ensure;
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use serde_json::{Value, json};

use crate::api_support::{Api, string_at};
use crate::live_support::api_with;

pub fn tests() -> Vec<DbTest> {
    db_tests![nested_fields_of_a_list_answer_what_each_task_s_own_read_answers]
}

const NESTED: &str = "progressEvents(afterSequence: 1, first: 2) { sequence eventType } \
    allProgress: progressEvents { sequence } partialResults(first: 1) { sequence } answerTrace { id answer citationChecks }";

async fn nested_fields_of_a_list_answer_what_each_task_s_own_read_answers(db: TestDb) -> anyhow::Result<()> {
    let api: Api = api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.poll_interval_ms = 100;
    })
    .await?;
    let alice = api.token("alice");
    let space = api.space("alice").await?;
    for (title, content) in crate::worker_support::DOCUMENTS.iter().take(3) {
        let input = json!({ "knowledgeSpaceId": space, "title": title, "content": content });
        api.data(
            Some(&alice),
            "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }",
            json!({ "input": input }),
        )
        .await?;
    }
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(string_at(&api.task(&alice, &space).await?, "/id")?);
    }
    let read = format!("query($id: UUID!) {{ researchTask(id: $id) {{ id stage {NESTED} }} }}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for task in &tasks[..3] {
        loop {
            let data = api.data(Some(&alice), &read, json!({ "id": task })).await?;
            if data["researchTask"]["stage"] == "COMPLETED" {
                break;
            }
            ensure!(tokio::time::Instant::now() < deadline, "task {task} did not complete");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // One more task paused before it completes (a short journal, no trace). The worker may
    // finish a task before the pause reaches it; then try another (it is listed too).
    let mut paused = false;
    for _ in 0..20 {
        let task = string_at(&api.task(&alice, &space).await?, "/id")?;
        tasks.push(task.clone());
        let body = api.call(Some(&alice), crate::api_support::PAUSE, json!({ "id": task })).await?;
        if body.get("errors").is_none() {
            paused = true;
            break;
        }
    }
    ensure!(paused, "no task stayed unfinished long enough to pause");
    let list = format!(
        "query($space: UUID!) {{ researchTasks(knowledgeSpaceId: $space, first: 10) {{ edges {{ node {{ id stage {NESTED} }} }} }} }}"
    );
    let listed = api.data(Some(&alice), &list, json!({ "space": space })).await?;
    let nodes: Vec<Value> =
        listed["researchTasks"]["edges"].as_array().into_iter().flatten().map(|edge| edge["node"].clone()).collect();
    ensure_eq!(nodes.len(), tasks.len().min(10), "the page holds every task, up to its size");
    for node in &nodes {
        let own = api.data(Some(&alice), &read, json!({ "id": node["id"] })).await?;
        ensure_eq!(node, &own["researchTask"], "the list's nested fields differ from the task's own read");
    }
    ensure!(
        nodes.iter().all(|node| node["answerTrace"].is_object() == (node["stage"] == "COMPLETED")),
        "completed tasks have their traces, the paused one none: {nodes:?}"
    );
    ensure!(
        nodes.iter().filter(|node| node["stage"] == "COMPLETED").all(|node| node["answerTrace"]["citationChecks"]
            .as_array()
            .is_some_and(|checks| !checks.is_empty() && checks.iter().all(|check| check["verdict"].is_string()))),
        "every answer carries its citation checks: {nodes:?}"
    );
    ensure!(nodes.iter().any(|node| node["stage"] == "PAUSED"), "one task is paused");
    ensure!(
        nodes.iter().all(|node| node["progressEvents"].as_array().is_some_and(|events| events.len() <= 2)),
        "first: 2 holds per task"
    );
    api.stop().await;
    Ok(())
}
