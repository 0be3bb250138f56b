//! Deleting through the API, on both databases: a task (running ones fenced, live
//! subscriptions ended), an answer trace, a whole space (in batches, finished by the
//! worker loop when the request that began it stopped half-way) and a tenant; after each,
//! nothing of it is readable, left in any table, streamed or delivered by webhook.
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use entity::{
    answer_trace, api_key, audit_event, knowledge_document, knowledge_passage, knowledge_space, member,
    permission_snapshot, research_task_answer_draft, research_task_job as job, research_task_outbox as outbox,
    research_task_partial_result, research_task_progress_event, research_thread, webhook_delivery, webhook_endpoint,
};
use kfs_tests::webhook_receiver::WebhookReceiver;
use kfs_tests::ws::WsClient;
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_support::{Api, READ_TASK, string_at};
use crate::live_support::{PROGRESS, api_with};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        deleting_a_task_removes_every_row_of_it_fences_its_worker_and_ends_its_subscriptions,
        deleting_a_space_removes_everything_in_it_and_ends_access_at_once,
        an_interrupted_space_deletion_is_finished_by_the_worker_loop,
        erasing_a_tenant_removes_its_rows_and_nothing_of_another_tenant,
        erasing_a_tenant_while_its_members_create_leaves_nothing_behind,
        an_interrupted_tenant_erasure_is_sealed_and_finished_by_the_worker_loop,
        a_write_racing_a_long_transaction_waits_for_the_lock,
    ]
}

const DELETE_TASK: &str = "mutation($id: UUID!) { deleteResearchTask(id: $id) }";
const ANSWER: &str = "subscription($task: UUID!) { researchTaskAnswer(taskId: $task) { offset text done reset } }";
const DELETE_TRACE: &str = "mutation($id: UUID!) { deleteAnswerTrace(id: $id) }";
const DELETE_SPACE: &str = "mutation($id: UUID!) { deleteKnowledgeSpace(id: $id) { knowledgeSpaces researchTasks answerTraces documents permissionSnapshots members apiKeys webhookEndpoints } }";
const ERASE: &str = "mutation($tenant: String!) { eraseTenant(tenantId: $tenant) { knowledgeSpaces researchTasks answerTraces documents permissionSnapshots members apiKeys webhookEndpoints auditEvents } }";
const TRACE_OF: &str = "query($id: UUID!) { researchTask(id: $id) { stage answerTrace { id } } }";
const READ_TRACE: &str = "query($id: UUID!) { answerTrace(id: $id) { id } }";
const ADD_DOCUMENT: &str =
    "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }";
const CREATE_ENDPOINT: &str =
    "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }";

/// A server with the embedded worker (tasks complete), webhooks allowed to loopback, and
/// `ops-admin` as its operator.
async fn api(db: &TestDb) -> anyhow::Result<Api> {
    api_with(db, |settings| {
        settings.embedded_worker = true;
        settings.worker.poll_interval_ms = 100;
        settings.worker.webhooks.allow_private = true;
        settings.worker.webhooks.retry_base_ms = 50;
        settings.operator_subjects = vec!["ops-admin".to_owned()];
    })
    .await
}

/// How many rows of `tenant` each table holds (the outbox, which has no tenant column,
/// counted through `tasks`).
async fn rows_of(db: &DatabaseConnection, tenant: &str, tasks: &[Uuid]) -> anyhow::Result<BTreeMap<&'static str, u64>> {
    macro_rules! count {
        ($entity:ident) => {
            $entity::Entity::find().filter($entity::Column::TenantId.eq(tenant)).count(db).await?
        };
    }
    Ok(BTreeMap::from([
        ("knowledge_spaces", count!(knowledge_space)),
        ("members", count!(member)),
        ("api_keys", count!(api_key)),
        ("permission_snapshots", count!(permission_snapshot)),
        ("answer_traces", count!(answer_trace)),
        ("documents", count!(knowledge_document)),
        ("passages", count!(knowledge_passage)),
        ("research_task_jobs", count!(job)),
        ("progress_events", count!(research_task_progress_event)),
        ("partial_results", count!(research_task_partial_result)),
        ("answer_drafts", count!(research_task_answer_draft)),
        ("webhook_endpoints", count!(webhook_endpoint)),
        ("webhook_deliveries", count!(webhook_delivery)),
        ("research_threads", count!(research_thread)),
        (
            "outbox",
            outbox::Entity::find().filter(outbox::Column::ResearchTaskJobId.is_in(tasks.to_vec())).count(db).await?,
        ),
    ]))
}

fn only_zeros(rows: &BTreeMap<&'static str, u64>) -> bool {
    rows.values().all(|count| *count == 0)
}

/// A space of `owner` holding two documents; returns its id.
async fn space_with_documents(api: &Api, owner: &str) -> anyhow::Result<String> {
    let space = api.space(owner).await?;
    for (title, content) in crate::worker_support::DOCUMENTS.iter().take(2) {
        let input = json!({ "knowledgeSpaceId": space, "title": title, "content": content });
        api.data(Some(&api.token(owner)), ADD_DOCUMENT, json!({ "input": input })).await?;
    }
    Ok(space)
}

/// Creates a task as `bearer` and waits until it completed; returns its id and trace id.
async fn completed_task(api: &Api, bearer: &str, space: &str) -> anyhow::Result<(String, String)> {
    let task = string_at(&api.task(bearer, space).await?, "/id")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let data = api.data(Some(bearer), TRACE_OF, json!({ "id": task })).await?;
        if data["researchTask"]["stage"] == "COMPLETED" {
            return Ok((task, string_at(&data, "/researchTask/answerTrace/id")?));
        }
        ensure!(tokio::time::Instant::now() < deadline, "task {task} did not complete: {data}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn deleting_a_task_removes_every_row_of_it_fences_its_worker_and_ends_its_subscriptions(
    db: TestDb,
) -> anyhow::Result<()> {
    let api = api(&db).await?;
    let (alice, bob) = (api.token("alice"), api.token("bob"));
    let space = space_with_documents(&api, "alice").await?;
    api.member("alice", &space, "bob", "EDITOR").await?;
    let (done, trace) = completed_task(&api, &alice, &space).await?;
    let done_id: Uuid = done.parse()?;

    // Nobody but its owner can delete it; to them it does not exist.
    ensure_eq!(api.code(Some(&bob), DELETE_TASK, json!({ "id": done })).await?, "NOT_FOUND");
    ensure_eq!(api.code(Some(&bob), DELETE_TRACE, json!({ "id": trace })).await?, "NOT_FOUND");
    ensure!(rows_of(&db.db, &api.tenant, &[done_id]).await?["progress_events"] > 0, "the task wrote events");

    ensure_eq!(api.data(Some(&alice), DELETE_TASK, json!({ "id": done })).await?["deleteResearchTask"], json!(true));
    ensure_eq!(api.data(Some(&alice), READ_TASK, json!({ "id": done })).await?["researchTask"], Value::Null);
    ensure_eq!(api.data(Some(&alice), READ_TRACE, json!({ "id": trace })).await?["answerTrace"], Value::Null);
    ensure_eq!(api.code(Some(&alice), DELETE_TASK, json!({ "id": done })).await?, "NOT_FOUND", "deleting twice");
    // An answer trace alone: it goes with every copy of its answer, its task stays.
    let (kept, kept_trace) = completed_task(&api, &alice, &space).await?;
    let answer_of = "query($id: UUID!) { answerTrace(id: $id) { answer } }";
    let answer =
        string_at(&api.data(Some(&alice), answer_of, json!({ "id": kept_trace })).await?, "/answerTrace/answer")?;
    ensure!(!db.tables_holding(&answer).await?.is_empty(), "the answer is stored before the deletion");
    let mut watcher = WsClient::connect_and_init(&api.server.ws_url(), Some(&alice)).await?;
    watcher.subscribe("answer", ANSWER, json!({ "task": kept })).await?;
    let streamed = watcher.collect("answer").await?;
    ensure!(streamed.iter().any(|delta| delta["data"]["researchTaskAnswer"]["done"] == true), "{streamed:?}");
    ensure_eq!(
        api.data(Some(&alice), DELETE_TRACE, json!({ "id": kept_trace })).await?["deleteAnswerTrace"],
        json!(true)
    );
    ensure_eq!(api.data(Some(&alice), READ_TRACE, json!({ "id": kept_trace })).await?["answerTrace"], Value::Null);
    ensure_eq!(
        api.data(Some(&alice), TRACE_OF, json!({ "id": kept })).await?["researchTask"]["stage"],
        json!("COMPLETED")
    );
    ensure_eq!(api.code(Some(&alice), DELETE_TRACE, json!({ "id": kept_trace })).await?, "NOT_FOUND", "deleting twice");
    // Not a copy is left in any table (before, the answer draft kept the whole text until
    // the task was deleted), and the answer stream has nothing to send any more.
    let holding = db.tables_holding(&answer).await?;
    ensure!(holding.is_empty(), "the deleted answer is still in {holding:?}");
    watcher.subscribe("again", ANSWER, json!({ "task": kept })).await?;
    let streamed = watcher.collect("again").await?;
    ensure!(
        streamed.iter().all(|delta| delta["data"]["researchTaskAnswer"]["text"].as_str().is_none_or(str::is_empty)),
        "the deleted answer was streamed again: {streamed:?}"
    );
    watcher.close().await?;
    // Each deletion is on record once, written in its own transaction.
    for (action, target, expected) in [
        ("research_task.deleted", &done, 1),
        ("answer_trace.deleted", &trace, 0),
        ("answer_trace.deleted", &kept_trace, 1),
    ] {
        let recorded = audit_event::Entity::find()
            .filter(audit_event::Column::Action.eq(action))
            .filter(audit_event::Column::TargetId.eq(target.as_str()))
            .count(&db.db)
            .await?;
        ensure_eq!(recorded, expected, "{action} of {target}");
    }
    for table in
        ["research_task_jobs", "progress_events", "partial_results", "answer_drafts", "answer_traces", "outbox"]
    {
        let left = job_rows(&db.db, done_id, table).await?;
        ensure_eq!(left, 0, "{table} still holds rows of the deleted task");
    }

    // A running task: its lease holder is fenced out, and a live subscription completes.
    let running = string_at(&api.task(&alice, &space).await?, "/id")?;
    let running_id: Uuid = running.parse()?;
    let mut socket = WsClient::connect_and_init(&api.server.ws_url(), Some(&alice)).await?;
    socket.subscribe("feed", PROGRESS, json!({ "task": running, "after": 0 })).await?;
    // Take the task from under the embedded worker's nose: a ghost claims it first (the
    // embedded worker may already have it, in which case it is the one fenced).
    let state = &api.server.server.state;
    let ghost =
        worker::lifecycle::claim_due(&state.db, &state.notifier, "ghost", 60_000, 10, entity::now_millis()).await?;
    ensure_eq!(api.data(Some(&alice), DELETE_TASK, json!({ "id": running })).await?["deleteResearchTask"], json!(true));
    let ended = tokio::time::timeout(Duration::from_secs(10), socket.collect("feed")).await;
    ensure!(matches!(ended, Ok(Ok(_))), "the subscription did not end with the task: {ended:?}");
    for claimed in ghost.iter().filter(|claimed| claimed.job.id == running_id) {
        let fenced = worker::lifecycle::heartbeat(&state.db, &claimed.lease, 60_000, entity::now_millis()).await;
        ensure!(matches!(fenced, Err(worker::lifecycle::LifecycleError::LeaseLost)), "{fenced:?}");
    }
    ensure_eq!(job_rows(&db.db, running_id, "research_task_jobs").await?, 0);
    // Nothing of it comes back: no worker re-creates a row, no event arrives.
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure_eq!(job_rows(&db.db, running_id, "progress_events").await?, 0);
    api.stop().await;
    Ok(())
}

/// Rows of one task in `table`.
async fn job_rows(db: &DatabaseConnection, task: Uuid, table: &str) -> anyhow::Result<u64> {
    Ok(match table {
        "research_task_jobs" => job::Entity::find_by_id(task).count(db).await?,
        "progress_events" => {
            research_task_progress_event::Entity::find()
                .filter(research_task_progress_event::Column::ResearchTaskJobId.eq(task))
                .count(db)
                .await?
        }
        "partial_results" => {
            research_task_partial_result::Entity::find()
                .filter(research_task_partial_result::Column::ResearchTaskJobId.eq(task))
                .count(db)
                .await?
        }
        "answer_drafts" => research_task_answer_draft::Entity::find_by_id(task).count(db).await?,
        "answer_traces" => {
            answer_trace::Entity::find().filter(answer_trace::Column::ResearchTaskId.eq(task)).count(db).await?
        }
        "outbox" => outbox::Entity::find().filter(outbox::Column::ResearchTaskJobId.eq(task)).count(db).await?,
        other => anyhow::bail!("no table {other}"),
    })
}

async fn deleting_a_space_removes_everything_in_it_and_ends_access_at_once(db: TestDb) -> anyhow::Result<()> {
    let api = api(&db).await?;
    let receiver = WebhookReceiver::start().await?;
    let (alice, bob) = (api.token("alice"), api.token("bob"));
    let space = space_with_documents(&api, "alice").await?;
    api.member("alice", &space, "bob", "VIEWER").await?;
    let (_, key) = api.key("alice", &space).await?;
    let input = json!({ "knowledgeSpaceId": space, "url": receiver.url(), "events": ["STAGE_CHANGED", "PAUSED"] });
    api.data(Some(&alice), CREATE_ENDPOINT, json!({ "input": input })).await?;
    let (done, _) = completed_task(&api, &alice, &space).await?;
    let (keyed, _) = completed_task(&api, &key, &space).await?;
    let thread = "mutation($s: UUID!) { createResearchThread(input: {knowledgeSpaceId: $s}) { id } }";
    api.data(Some(&alice), thread, json!({ "s": space })).await?;
    // A task held paused, with a live subscriber. The embedded worker may finish a task
    // before the pause reaches it; then try another (each one counts below).
    let mut paused = None;
    for _ in 0..20 {
        let task = string_at(&api.task(&alice, &space).await?, "/id")?;
        let body = api.call(Some(&alice), crate::api_support::PAUSE, json!({ "id": task })).await?;
        if body.get("errors").is_none() {
            paused = Some(task);
            break;
        }
    }
    let paused = paused.context("no task stayed unfinished long enough to pause")?;
    let mut socket = WsClient::connect_and_init(&api.server.ws_url(), Some(&alice)).await?;
    socket.subscribe("feed", PROGRESS, json!({ "task": paused, "after": 0 })).await?;
    let tasks: Vec<Uuid> = job::Entity::find()
        .filter(job::Column::TenantId.eq(&api.tenant))
        .all(&db.db)
        .await?
        .into_iter()
        .map(|task| task.id)
        .collect();
    let before = rows_of(&db.db, &api.tenant, &tasks).await?;
    ensure!(
        before["webhook_deliveries"] > 0 && before["passages"] > 0 && before["research_threads"] == 1,
        "the space is full: {before:?}"
    );

    // Only an owner may delete it.
    ensure_eq!(api.code(Some(&bob), DELETE_SPACE, json!({ "id": space })).await?, "FORBIDDEN");
    ensure_eq!(api.code(Some(&key), DELETE_SPACE, json!({ "id": space })).await?, "FORBIDDEN");
    ensure_eq!(api.code(Some(&api.token("mallory")), DELETE_SPACE, json!({ "id": space })).await?, "NOT_FOUND");
    // Deliveries already on their way arrive first: on a loaded machine the sender may
    // still be posting the pause events' deliveries. Wait until none has arrived for a
    // second (a sender that went on after the deletion is what the end checks).
    let mut deliveries_before = receiver.received().len();
    let settle_until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = receiver.received().len();
        if now == deliveries_before || std::time::Instant::now() > settle_until {
            break;
        }
        deliveries_before = now;
    }

    let counts = api.data(Some(&alice), DELETE_SPACE, json!({ "id": space })).await?["deleteKnowledgeSpace"].clone();
    // The counts are the rows the space held.
    ensure_eq!(counts["knowledgeSpaces"], json!(1), "{counts}");
    ensure!(before["research_task_jobs"] >= 3 && before["answer_traces"] >= 2, "{before:?}");
    ensure_eq!(counts["researchTasks"], json!(before["research_task_jobs"]), "{counts}");
    ensure_eq!(counts["answerTraces"], json!(before["answer_traces"]), "{counts}");
    ensure_eq!(counts["documents"], json!(2), "{counts}");
    ensure_eq!(counts["members"], json!(2), "{counts}");
    ensure_eq!(counts["apiKeys"], json!(1), "{counts}");
    ensure_eq!(counts["webhookEndpoints"], json!(1), "{counts}");
    let after = rows_of(&db.db, &api.tenant, &tasks).await?;
    ensure!(only_zeros(&after), "rows left behind: {after:?}");

    // Every way in is closed: the subscriber's stream ended, the key is dead, the space,
    // its tasks and its lists are gone for everyone.
    let ended = tokio::time::timeout(Duration::from_secs(10), socket.collect("feed")).await;
    // It ends either way a grant's end is reported (complete, or an error), never hangs.
    ensure!(ended.is_ok(), "the live subscription outlived its space");
    let (status, body) = api.server.post(Some(&key), "{ viewer { subjectId } }", json!({})).await?;
    ensure_eq!(kfs_tests::server::first_error_code(&body).as_deref(), Some("UNAUTHENTICATED"), "{status} {body}");
    let space_read =
        api.data(Some(&alice), "query($id: UUID!) { knowledgeSpace(id: $id) { id } }", json!({ "id": space })).await?;
    ensure_eq!(space_read["knowledgeSpace"], Value::Null);
    for task in [&done, &keyed, &paused] {
        ensure_eq!(api.data(Some(&alice), READ_TASK, json!({ "id": task })).await?["researchTask"], Value::Null);
    }
    let listed = api.data(Some(&alice), crate::api_support::LIST_TASKS, json!({ "space": space })).await?;
    ensure_eq!(listed["researchTasks"]["edges"], json!([]), "the list of a deleted space is empty");
    // Nothing more is delivered once the endpoint is gone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    ensure_eq!(receiver.received().len(), deliveries_before, "a delivery went out after the space was deleted");
    // The record of the deletion outlives the space (operators read it).
    let log = api
        .data(
            Some(&api.token("ops-admin")),
            "query($space: UUID) { auditEvents(knowledgeSpaceId: $space, first: 50) { edges { node { action actorSubjectId targetId } } } }",
            json!({ "space": space }),
        )
        .await?;
    let actions: Vec<&str> = log["auditEvents"]["edges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|edge| edge["node"]["action"].as_str())
        .collect();
    ensure_eq!(actions.first().copied(), Some("knowledge_space.deleted"), "{log}");
    ensure!(actions.contains(&"api_key.created") && actions.contains(&"knowledge_space.created"), "{actions:?}");
    api.stop().await;
    Ok(())
}

async fn an_interrupted_space_deletion_is_finished_by_the_worker_loop(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let space = space_with_documents(&api, "alice").await?;
    let task = string_at(&api.task(&api.token("alice"), &space).await?, "/id")?;
    let space_id: Uuid = space.parse()?;
    // The request began the deletion (sealed the space) and died before deleting a row.
    let state = &api.server.server.state;
    let txn = worker::store::begin_write(&state.db).await?;
    worker::lifecycle::begin_space_deletion(&txn, &api.tenant, space_id, "alice", entity::now_millis()).await?;
    txn.commit().await?;
    // Sealed: already unreadable, though every row is still there.
    ensure_eq!(
        api.data(Some(&api.token("alice")), READ_TASK, json!({ "id": task })).await?["researchTask"],
        Value::Null
    );
    ensure!(!only_zeros(&rows_of(&db.db, &api.tenant, &[]).await?), "nothing was deleted yet");
    // A worker's deletion loop finishes it.
    let finished = worker::lifecycle::finish_pending_deletions(&state.db, &state.notifier).await?;
    ensure_eq!(finished, 1);
    let left = rows_of(&db.db, &api.tenant, &[task.parse()?]).await?;
    ensure!(only_zeros(&left), "rows left behind: {left:?}");
    ensure_eq!(worker::lifecycle::finish_pending_deletions(&state.db, &state.notifier).await?, 0, "nothing pending");
    api.stop().await;
    Ok(())
}

async fn erasing_a_tenant_removes_its_rows_and_nothing_of_another_tenant(db: TestDb) -> anyhow::Result<()> {
    let api = api(&db).await?;
    let other = Api {
        server: kfs_tests::server::TestServer::start(&db.url, false).await?,
        tenant: format!("tenant-{}", Uuid::new_v4().simple()),
    };
    let operator = kfs_tests::server::TestServer::token("ops-admin", "operators");
    let alice = api.token("alice");
    let first = space_with_documents(&api, "alice").await?;
    let second = space_with_documents(&api, "carol").await?;
    let (task, _) = completed_task(&api, &alice, &first).await?;
    let thread = "mutation($s: UUID!) { createResearchThread(input: {knowledgeSpaceId: $s, title: \"kept?\"}) { id } }";
    api.data(Some(&alice), thread, json!({ "s": first })).await?;
    api.key("carol", &second).await?;
    let kept = space_with_documents(&other, "dave").await?;
    other.data(Some(&other.token("dave")), thread, json!({ "s": kept })).await?;
    let kept_before = rows_of(&db.db, &other.tenant, &[]).await?;

    ensure_eq!(
        api.code(Some(&alice), ERASE, json!({ "tenant": api.tenant })).await?,
        "FORBIDDEN",
        "owners are not operators"
    );
    let counts = api.data(Some(&operator), ERASE, json!({ "tenant": api.tenant })).await?["eraseTenant"].clone();
    ensure_eq!(counts["knowledgeSpaces"], json!(2), "{counts}");
    ensure_eq!(counts["researchTasks"], json!(1), "{counts}");
    ensure_eq!(counts["documents"], json!(4), "{counts}");
    ensure_eq!(counts["apiKeys"], json!(1), "{counts}");
    ensure!(counts["auditEvents"].as_i64().unwrap_or_default() >= 3, "the tenant's log went too: {counts}");
    let left = rows_of(&db.db, &api.tenant, &[task.parse()?]).await?;
    ensure!(only_zeros(&left), "rows of the erased tenant remain: {left:?}");
    let audit_left =
        audit_event::Entity::find().filter(audit_event::Column::TenantId.eq(&api.tenant)).count(&db.db).await?;
    ensure_eq!(audit_left, 0, "audit events of the erased tenant remain");
    ensure_eq!(rows_of(&db.db, &other.tenant, &[]).await?, kept_before, "another tenant lost rows");
    ensure!(
        other
            .data(
                Some(&other.token("dave")),
                "query($id: UUID!) { knowledgeSpace(id: $id) { id } }",
                json!({ "id": kept })
            )
            .await?["knowledgeSpace"]["id"]
            == json!(kept),
        "the other tenant's space"
    );
    // The erasure is on record, in the operator's tenant, naming the tenant erased.
    let record = audit_event::Entity::find()
        .filter(audit_event::Column::TenantId.eq("operators"))
        .filter(audit_event::Column::TargetId.eq(&api.tenant))
        .one(&db.db)
        .await?
        .context("no tenant.erased event")?;
    ensure_eq!(record.action, "tenant.erased");
    ensure_eq!(record.actor_subject_id, "ops-admin");
    other.stop().await;
    api.stop().await;
    Ok(())
}

/// What one creator's request came to.
#[derive(Debug, Clone)]
struct Outcome {
    /// `ok`, or the error's code.
    code: String,
    /// The error's message, if any.
    message: String,
    /// The id of what it created, if it did.
    id: Option<String>,
    /// Whether its answer arrived after `eraseTenant` answered.
    after_erasure: bool,
}

/// One creator: the operation, its variables for attempt `n`, and where the id is.
struct Creator {
    what: &'static str,
    query: &'static str,
    variables: Box<dyn Fn(usize) -> Value + Send + Sync>,
    id_at: &'static str,
}

/// Runs `creator` as `bearer`, one request after another, until an error, `erased` is set,
/// or 200 tries; every outcome recorded.
async fn create_until_refused(
    api: &Api,
    bearer: &str,
    creator: &Creator,
    erased: &std::sync::atomic::AtomicBool,
    started: &tokio::sync::Semaphore,
) -> anyhow::Result<Vec<Outcome>> {
    use std::sync::atomic::Ordering;
    let mut outcomes = Vec::new();
    for n in 0..200 {
        if erased.load(Ordering::SeqCst) {
            break;
        }
        let (status, body) = api.server.post(Some(bearer), creator.query, (creator.variables)(n)).await?;
        ensure!(status < 500, "{}: status {status}: {body}", creator.what);
        let code = kfs_tests::server::first_error_code(&body).unwrap_or_else(|| "ok".to_owned());
        let message = body.pointer("/errors/0/message").and_then(Value::as_str).unwrap_or_default().to_owned();
        let id = body.pointer(creator.id_at).and_then(Value::as_str).map(str::to_owned);
        outcomes.push(Outcome { code: code.clone(), message, id, after_erasure: erased.load(Ordering::SeqCst) });
        if n == 2 {
            started.add_permits(1);
        }
        if code != "ok" {
            break;
        }
    }
    if outcomes.len() < 3 {
        started.add_permits(1);
    }
    Ok(outcomes)
}

/// Erasing a tenant while its members keep creating spaces, members, keys, documents,
/// tasks and webhook endpoints: the erasure seals the tenant first, so every creation is
/// either erased with the rest or refused with CONFLICT saying the tenant is being erased,
/// no request answers a server error ("database is locked" on SQLite, before), and once
/// `eraseTenant` answers nothing is left but what requests answered after it created.
/// Before, the erasure listed the spaces once and those created meanwhile survived.
async fn erasing_a_tenant_while_its_members_create_leaves_nothing_behind(db: TestDb) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let api = api(&db).await?;
    let operator = kfs_tests::server::TestServer::token("ops-admin", "operators");
    let alice = api.token("alice");
    let home = space_with_documents(&api, "alice").await?;
    // Enough to erase that the erasure takes a while.
    for _ in 0..15 {
        space_with_documents(&api, "alice").await?;
    }
    completed_task(&api, &alice, &home).await?;
    let home_for = {
        let home = home.clone();
        move |extra: Value| {
            let mut input = json!({ "knowledgeSpaceId": home });
            if let (Some(input), Some(extra)) = (input.as_object_mut(), extra.as_object()) {
                input.extend(extra.clone());
            }
            json!({ "input": input })
        }
    };
    let creators = [
        Creator {
            what: "space",
            query: "mutation($input: CreateKnowledgeSpaceInput!) { createKnowledgeSpace(input: $input) { id } }",
            variables: Box::new(|n| json!({ "input": { "name": format!("race {n}") } })),
            id_at: "/data/createKnowledgeSpace/id",
        },
        Creator {
            what: "member",
            query: "mutation($input: AddKnowledgeSpaceMemberInput!) { addKnowledgeSpaceMember(input: $input) { subjectId } }",
            variables: Box::new({
                let home_for = home_for.clone();
                move |n| home_for(json!({ "subjectId": format!("member-{n}"), "role": "VIEWER" }))
            }),
            id_at: "/data/addKnowledgeSpaceMember/subjectId",
        },
        Creator {
            what: "key",
            query: "mutation($input: CreateApiKeyInput!) { createApiKey(input: $input) { apiKey { id } } }",
            variables: Box::new({
                let home_for = home_for.clone();
                move |n| home_for(json!({ "name": format!("key {n}") }))
            }),
            id_at: "/data/createApiKey/apiKey/id",
        },
        Creator {
            what: "document",
            query: ADD_DOCUMENT,
            variables: Box::new({
                let home_for = home_for.clone();
                move |n| home_for(json!({ "title": format!("doc {n}"), "content": format!("Race document {n}.") }))
            }),
            id_at: "/data/addKnowledgeDocument/id",
        },
        Creator {
            what: "task",
            query: "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }",
            variables: Box::new({
                let home_for = home_for.clone();
                move |n| home_for(json!({ "query": format!("What is race document {n}?") }))
            }),
            id_at: "/data/createResearchTask/id",
        },
        Creator {
            what: "webhook endpoint",
            query: CREATE_ENDPOINT,
            variables: Box::new({
                let home_for = home_for.clone();
                move |n| home_for(json!({ "url": format!("http://127.0.0.1:9/hook/{n}"), "events": ["STARTED"] }))
            }),
            id_at: "/data/createWebhookEndpoint/endpoint/id",
        },
    ];
    let erased = AtomicBool::new(false);
    let started = tokio::sync::Semaphore::new(0);
    let erase = async {
        // Every creator is under way before the erasure begins.
        let _all = started.acquire_many(creators.len() as u32).await?;
        let (status, body) = api.server.post(Some(&operator), ERASE, json!({ "tenant": api.tenant })).await?;
        erased.store(true, Ordering::SeqCst);
        // Read at once: nothing of the tenant may be readable now but what was created after.
        let spaces =
            api.data(Some(&alice), "{ knowledgeSpaces(first: 100) { edges { node { id } } } }", json!({})).await?;
        anyhow::Ok((status, body, spaces))
    };
    let runs = futures_util::future::join_all(
        creators.iter().map(|creator| create_until_refused(&api, &alice, creator, &erased, &started)),
    );
    let (erasure, outcomes) = tokio::join!(erase, runs);
    let (status, counts, readable) = erasure?;
    ensure!(status == 200 && counts.get("errors").is_none(), "eraseTenant answered {status}: {counts}");
    let mut late: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for (creator, outcomes) in creators.iter().zip(outcomes) {
        for outcome in outcomes? {
            ensure!(
                ["ok", "CONFLICT", "NOT_FOUND", "FORBIDDEN"].contains(&outcome.code.as_str()),
                "{}: {outcome:?}",
                creator.what
            );
            if outcome.code == "CONFLICT" {
                ensure!(outcome.message.contains("being erased"), "{}: {outcome:?}", creator.what);
            }
            *tally.entry(format!("{} {}", creator.what, outcome.code)).or_default() += 1;
            if let (Some(id), true) = (outcome.id, outcome.after_erasure) {
                late.insert(id);
            }
        }
    }
    eprintln!(
        "deleting ({}): creators' outcomes {tally:?}; created after the erasure answered: {late:?}",
        db.backend.name()
    );
    ensure!(tally.keys().any(|key| key.ends_with("CONFLICT")), "no creator met the seal: {tally:?}");
    // Readable right after the answer: only spaces created after it.
    for edge in readable["knowledgeSpaces"]["edges"].as_array().into_iter().flatten() {
        let id = edge["node"]["id"].as_str().unwrap_or_default();
        ensure!(late.contains(id), "space {id} is readable after the erasure answered");
    }
    // Left in the database: nothing but what was created after, in spaces created after.
    let spaces: Vec<Uuid> = knowledge_space::Entity::find()
        .filter(knowledge_space::Column::TenantId.eq(&api.tenant))
        .all(&db.db)
        .await?
        .into_iter()
        .map(|space| space.id)
        .collect();
    for space in &spaces {
        ensure!(late.contains(&space.to_string()), "space {space} survived the erasure");
    }
    macro_rules! outside_late_spaces {
        ($entity:ident) => {
            $entity::Entity::find()
                .filter($entity::Column::TenantId.eq(&api.tenant))
                .filter($entity::Column::KnowledgeSpaceId.is_not_in(spaces.clone()))
                .count(&db.db)
                .await?
        };
    }
    let left = BTreeMap::from([
        ("members", outside_late_spaces!(member)),
        ("api_keys", outside_late_spaces!(api_key)),
        ("documents", outside_late_spaces!(knowledge_document)),
        ("research_task_jobs", outside_late_spaces!(job)),
        ("permission_snapshots", outside_late_spaces!(permission_snapshot)),
        ("answer_traces", outside_late_spaces!(answer_trace)),
        ("webhook_endpoints", outside_late_spaces!(webhook_endpoint)),
        ("passages", outside_late_spaces!(knowledge_passage)),
    ]);
    ensure!(only_zeros(&left), "rows of the erased tenant survived: {left:?}");
    let audit_left = audit_event::Entity::find()
        .filter(audit_event::Column::TenantId.eq(&api.tenant))
        .all(&db.db)
        .await?
        .into_iter()
        .filter(|event| event.knowledge_space_id.is_none_or(|space| !spaces.contains(&space)))
        .count();
    ensure_eq!(audit_left, 0, "audit events of the erased tenant survived");
    ensure_eq!(
        entity::tenant_erasure::Entity::find_by_id(api.tenant.clone()).count(&db.db).await?,
        0,
        "the seal ends when the erasure is complete"
    );
    // The seal is gone: the tenant can start again.
    let again =
        api.data(Some(&alice), "mutation { createKnowledgeSpace(input: {name: \"after\"}) { id } }", json!({})).await?;
    ensure!(again["createKnowledgeSpace"]["id"].is_string(), "{again}");
    api.stop().await;
    Ok(())
}

/// An erasure whose request died after the seal is finished by the worker's
/// pending-deletions loop; meanwhile nothing of the tenant is readable and nothing new is
/// accepted for it.
async fn an_interrupted_tenant_erasure_is_sealed_and_finished_by_the_worker_loop(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let alice = api.token("alice");
    let space = space_with_documents(&api, "alice").await?;
    let task = string_at(&api.task(&alice, &space).await?, "/id")?;
    let state = &api.server.server.state;
    worker::lifecycle::seal_tenant(&state.db, &api.tenant, "ops-admin", entity::now_millis()).await?;
    ensure_eq!(api.data(Some(&alice), READ_TASK, json!({ "id": task })).await?["researchTask"], Value::Null);
    let refused = api
        .call(Some(&alice), "mutation { createKnowledgeSpace(input: {name: \"sealed\"}) { id } }", json!({}))
        .await?;
    ensure_eq!(kfs_tests::server::first_error_code(&refused).as_deref(), Some("CONFLICT"), "{refused}");
    ensure!(refused["errors"][0]["message"].as_str().is_some_and(|m| m.contains("being erased")), "{refused}");
    ensure!(!only_zeros(&rows_of(&db.db, &api.tenant, &[]).await?), "nothing was deleted yet");
    let finished = worker::lifecycle::finish_pending_erasures(&state.db, &state.notifier).await?;
    ensure_eq!(finished, 1);
    let left = rows_of(&db.db, &api.tenant, &[task.parse()?]).await?;
    ensure!(only_zeros(&left), "rows left behind: {left:?}");
    ensure_eq!(worker::lifecycle::finish_pending_erasures(&state.db, &state.notifier).await?, 0, "nothing pending");
    let again =
        api.data(Some(&alice), "mutation { createKnowledgeSpace(input: {name: \"after\"}) { id } }", json!({})).await?;
    ensure!(again["createKnowledgeSpace"]["id"].is_string(), "the seal ended: {again}");
    api.stop().await;
    Ok(())
}

/// A write that races a long write transaction waits for the lock and then succeeds: on
/// SQLite every write takes the one write lock up front and waits (the busy timeout); a
/// wait that ran out would be SERVICE_UNAVAILABLE with `Retry-After`, never an internal
/// error. PostgreSQL locks rows, so there the write simply goes through.
async fn a_write_racing_a_long_transaction_waits_for_the_lock(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let alice = api.token("alice");
    let state = &api.server.server.state;
    let txn = worker::store::begin_write(&state.db).await?;
    worker::lifecycle::guard_tenant(&txn, "someone-else").await?;
    let create = "mutation { createKnowledgeSpace(input: {name: \"waits\"}) { id } }";
    let holder = async {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        txn.commit().await
    };
    let write = async {
        let started = std::time::Instant::now();
        let answer = api.call(Some(&alice), create, json!({})).await;
        (answer, started.elapsed())
    };
    let ((created, took), committed) = tokio::join!(write, holder);
    committed?;
    let created = created?;
    ensure!(created["data"]["createKnowledgeSpace"]["id"].is_string(), "{created}");
    eprintln!("deleting ({}): the racing write answered after {took:?}", db.backend.name());
    api.stop().await;
    Ok(())
}
