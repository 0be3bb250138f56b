//! A person in the loop: a task pauses for its plan to be approved (as proposed or edited)
//! or for a clarifying question to be answered; the wait is visible (`awaiting`, the
//! `PAUSED` event, webhooks, `/ops` counts), bounded (`limits.input_timeout_ms`, not
//! counted against `limits.deadline_ms`) and answered only by whoever may command the
//! task. Every race between the answers, cancel, the timeout and completion has one winner.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::ensure;
use entity::research_task_wait as wait;
use entity::{AccessChannel, ProgressEventType, ResearchMode, Stage, now_millis, research_task_job as job};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ActiveModelTrait as _, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde_json::{Value, json};
use worker::Notifier;
use worker::lifecycle::{self, LifecycleError, NewTask, TaskRef};
use worker::pipeline::{RunOutcome, Stop};
use worker::research::engine::{
    Answer, BuiltinEngine, CostReport, EngineError, Passage, Plan, ResearchEngine, Retrieval, StageContext, Staged,
    async_trait,
};
use worker::runtime::run_due;

use crate::api_support::{Api, CREATE_TASK, RESUME, string_at};
use crate::worker_support::{events, pipeline, reload};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_plan_waits_for_approval_and_round_one_searches_the_edited_plan,
        answers_are_checked_first_and_go_only_to_the_wait_they_answer,
        a_clarification_is_asked_once_and_its_answer_reaches_the_plan_and_the_answer,
        a_wait_ends_by_resume_or_timeout_and_waiting_does_not_count_against_the_deadline,
        approve_racing_cancel_or_another_approval_has_one_winner,
        approve_racing_the_timeout_ends_the_wait_once,
        a_note_racing_completion_lands_before_it_or_is_refused_after,
        against_the_stand_in_a_clarification_and_an_edited_plan_are_what_the_model_and_retrieval_see,
    ]
}

const APPROVE: &str = "mutation($id: UUID!, $q: [String!], $v: Int) { \
    approveResearchPlan(id: $id, subQueries: $q, expectedRowVersion: $v) { id stage rowVersion awaiting { reason } } }";
const ANSWER: &str = "mutation($id: UUID!, $a: String!, $v: Int) { \
    answerResearchClarification(id: $id, answer: $a, expectedRowVersion: $v) { id stage rowVersion } }";
const AWAITING: &str = "query($id: UUID!) { researchTask(id: $id) { stage rowVersion pausedFromStage \
    awaiting { reason plan question since until } } }";
const ADD_DOCUMENT: &str = "mutation($s: UUID!, $t: String!, $c: String!) { \
    addKnowledgeDocument(input: {knowledgeSpaceId: $s, title: $t, content: $c}) { id } }";
const CREATE_ENDPOINT: &str =
    "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { endpoint { id } } }";

/// Three documents: the question's words in the first, other words in the others.
const DOCUMENTS: &[(&str, &str)] = &[
    ("Honey", "Bees turn nectar into honey by evaporation."),
    ("Propolis", "Propolis is a resin that bees use to seal the hive."),
    ("Gardening", "Tomatoes need sun and regular watering."),
];

/// A server with a space of `DOCUMENTS` owned by alice, bob an editor in it.
async fn api_with_space(db: &TestDb) -> anyhow::Result<(Api, String)> {
    // No embedded worker (the test runs the tasks); webhooks may point at loopback.
    let api = crate::live_support::api_with(db, |settings| settings.worker.webhooks.allow_private = true).await?;
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "EDITOR").await?;
    for (title, content) in DOCUMENTS {
        api.data(Some(&api.token("alice")), ADD_DOCUMENT, json!({ "s": space, "t": title, "c": content })).await?;
    }
    Ok((api, space))
}

/// Creates a task as alice with `limits`; returns its id.
async fn create(api: &Api, space: &str, query: &str, limits: Value) -> anyhow::Result<String> {
    let input = json!({ "knowledgeSpaceId": space, "query": query, "mode": "RESEARCH", "limits": limits });
    let data = api.data(Some(&api.token("alice")), CREATE_TASK, json!({ "input": input })).await?;
    string_at(&data, "/createResearchTask/id")
}

/// Runs every due task once with `engine` (the built-in one when `None`).
async fn run(db: &TestDb, engine: Option<Arc<dyn ResearchEngine>>, now: i64) -> anyhow::Result<Vec<RunOutcome>> {
    let notifier = Notifier::new();
    Ok(run_due(&pipeline(db, &notifier, "waits", engine), &Stop::default(), now).await?.1)
}

fn id_of(id: &str) -> anyhow::Result<uuid::Uuid> {
    Ok(uuid::Uuid::parse_str(id)?)
}

/// The payloads of the task's events of `event_type`, oldest first.
async fn payloads(db: &TestDb, task: uuid::Uuid, event_type: ProgressEventType) -> anyhow::Result<Vec<Value>> {
    Ok(events(db, task).await?.into_iter().filter(|event| event.event_type == event_type).map(|e| e.payload).collect())
}

async fn waits_of(db: &TestDb, task: uuid::Uuid) -> anyhow::Result<Vec<wait::Model>> {
    Ok(worker::store::waits::of_task(&db.db, task).await?)
}

async fn a_plan_waits_for_approval_and_round_one_searches_the_edited_plan(db: TestDb) -> anyhow::Result<()> {
    let (api, space) = api_with_space(&db).await?;
    let alice = api.token("alice");
    // A webhook endpoint of alice's that wants PAUSED events.
    let input = json!({ "knowledgeSpaceId": space, "url": "http://127.0.0.1:9/kfs", "events": ["PAUSED"] });
    api.data(Some(&alice), CREATE_ENDPOINT, json!({ "input": input })).await?;
    let limits = json!({ "approve_plan": true, "max_rounds": 1 });
    let id = create(&api, &space, "How do bees turn nectar into honey and seal the hive?", limits).await?;
    let task = id_of(&id)?;

    let outcomes = run(&db, None, now_millis()).await?;
    ensure_eq!(outcomes, vec![RunOutcome::AwaitingInput]);
    let row = reload(&db, task).await?;
    ensure_eq!((row.stage, row.paused_from_stage), (Stage::Paused, Some(Stage::Retrieving)));
    ensure!(row.lease_token.is_none() && row.worker_id.is_none(), "a waiting task holds no lease");
    ensure_eq!(row.execution_attempts, 0, "waiting is not a failed attempt");
    let read = api.data(Some(&alice), AWAITING, json!({ "id": id })).await?;
    let awaiting = &read["researchTask"]["awaiting"];
    ensure_eq!(awaiting["reason"], json!("PLAN_APPROVAL"), "{read}");
    ensure_eq!(awaiting["question"], Value::Null);
    let proposed: Vec<String> = serde_json::from_value(awaiting["plan"].clone())?;
    ensure!(!proposed.is_empty(), "{read}");
    let since = chrono::DateTime::parse_from_rfc3339(awaiting["since"].as_str().unwrap_or_default())?;
    let until = chrono::DateTime::parse_from_rfc3339(awaiting["until"].as_str().unwrap_or_default())?;
    ensure_eq!((until - since).num_milliseconds(), 86_400_000, "the default input timeout");
    let paused = payloads(&db, task, ProgressEventType::Paused).await?;
    ensure_eq!(paused.len(), 1);
    ensure_eq!((&paused[0]["reason"], &paused[0]["plan"]), (&json!("plan_approval"), &json!(proposed)));
    // The webhook says what the task waits for, and nothing of the plan.
    let delivery = entity::webhook_delivery::Entity::find()
        .filter(entity::webhook_delivery::Column::ResearchTaskJobId.eq(task))
        .one(&db.db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no PAUSED delivery"))?;
    let body: Value = serde_json::from_str(&delivery.body)?;
    ensure_eq!(body["data"]["awaiting"], json!("plan_approval"), "{body}");
    ensure!(!delivery.body.contains(&proposed[0]), "no plan in the webhook: {}", delivery.body);
    // The operations page counts it; no worker claims it before its time.
    let counts = worker::store::ops::awaiting_counts(&db.db).await?;
    ensure_eq!(counts, vec![("plan_approval".to_owned(), 1), ("clarification".to_owned(), 0)]);
    ensure_eq!(run(&db, None, now_millis()).await?, Vec::<RunOutcome>::new());

    // Approved with an edited plan: resumed at retrieving, awaiting gone, rowVersion bumped.
    let version = row.row_version;
    let edited = json!(["propolis resin", "nectar evaporation"]);
    let approved = api.data(Some(&alice), APPROVE, json!({ "id": id, "q": edited, "v": version })).await?;
    ensure_eq!(approved["approveResearchPlan"]["stage"], json!("RETRIEVING"), "{approved}");
    ensure_eq!(approved["approveResearchPlan"]["rowVersion"], json!(version + 1));
    ensure_eq!(approved["approveResearchPlan"]["awaiting"], Value::Null);
    // The same approval again is stale: it resumed once.
    let again = api.call(Some(&alice), APPROVE, json!({ "id": id, "q": edited, "v": version })).await?;
    ensure_eq!(again["errors"][0]["extensions"]["code"], json!("CONFLICT"), "{again}");
    let resumed = payloads(&db, task, ProgressEventType::Resumed).await?;
    ensure_eq!(resumed.len(), 1);
    ensure_eq!(
        (&resumed[0]["reason"], &resumed[0]["edited"], &resumed[0]["answered"], &resumed[0]["timed_out"]),
        (&json!("plan_approval"), &json!(true), &json!(false), &json!(false)),
        "{resumed:?}"
    );

    let outcomes = run(&db, None, now_millis()).await?;
    ensure!(matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]), "{outcomes:?}");
    // Round 1 searched the edited plan, and the answer cites what it found.
    let retrievals: Vec<Value> = crate::worker_support::partials(&db, task)
        .await?
        .into_iter()
        .filter(|row| row.idempotency_key.starts_with("retrieval:"))
        .map(|row| row.evidence_bundle["sub_query"].clone())
        .collect();
    ensure_eq!(json!(retrievals), edited);
    let trace = entity::answer_trace::Entity::find()
        .filter(entity::answer_trace::Column::ResearchTaskId.eq(task))
        .one(&db.db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no trace"))?;
    ensure!(trace.answer.contains("resin"), "{}", trace.answer);
    ensure_eq!(worker::store::ops::awaiting_counts(&db.db).await?[0].1, 0);
    api.stop().await;
    Ok(())
}

async fn answers_are_checked_first_and_go_only_to_the_wait_they_answer(db: TestDb) -> anyhow::Result<()> {
    let (api, space) = api_with_space(&db).await?;
    let (alice, bob) = (api.token("alice"), api.token("bob"));
    let id =
        create(&api, &space, "How do bees make honey?", json!({ "approve_plan": true, "max_sub_queries": 3 })).await?;
    // Before it waits: CONFLICT naming that it waits for nothing.
    let early = api.call(Some(&alice), APPROVE, json!({ "id": id })).await?;
    ensure_eq!(early["errors"][0]["extensions"]["code"], json!("CONFLICT"), "{early}");
    ensure!(early["errors"][0]["message"].as_str().is_some_and(|m| m.contains("waits for no input")), "{early}");
    ensure_eq!(run(&db, None, now_millis()).await?, vec![RunOutcome::AwaitingInput]);

    // Bad input is BAD_USER_INPUT whatever the task's state or row version.
    let bad_plans = [
        json!([]),
        json!(vec!["q"; 17]),
        json!(["ok", "  "]),
        json!(["x".repeat(4_001)]),
        json!(["one", "two", "three", "four"]), // over the task's limits.max_sub_queries of 3
    ];
    for plan in bad_plans {
        let code = api.code(Some(&alice), APPROVE, json!({ "id": id, "q": plan, "v": 999 })).await?;
        ensure_eq!(code, "BAD_USER_INPUT", "{plan}");
    }
    for answer in [json!(""), json!("é".repeat(4_001))] {
        ensure_eq!(api.code(Some(&alice), ANSWER, json!({ "id": id, "a": answer, "v": 999 })).await?, "BAD_USER_INPUT");
    }
    // Another subject (even a member who reads the space) and a random id answer alike.
    ensure_eq!(api.code(Some(&bob), APPROVE, json!({ "id": id })).await?, "NOT_FOUND");
    ensure_eq!(api.code(Some(&bob), ANSWER, json!({ "id": id, "a": "wax" })).await?, "NOT_FOUND");
    let random = uuid::Uuid::new_v4();
    ensure_eq!(api.code(Some(&alice), APPROVE, json!({ "id": random })).await?, "NOT_FOUND");
    // The wrong kind of input: CONFLICT naming what it waits for.
    let wrong = api.call(Some(&alice), ANSWER, json!({ "id": id, "a": "wax" })).await?;
    ensure_eq!(wrong["errors"][0]["extensions"]["code"], json!("CONFLICT"), "{wrong}");
    ensure_eq!(wrong["errors"][0]["extensions"]["currentStage"], json!("PAUSED"), "{wrong}");
    ensure!(wrong["errors"][0]["message"].as_str().is_some_and(|m| m.contains("plan approval")), "{wrong}");
    // A stale row version is CONFLICT; nothing changed.
    let stale = api.call(Some(&alice), APPROVE, json!({ "id": id, "v": 1 })).await?;
    ensure_eq!(stale["errors"][0]["extensions"]["code"], json!("CONFLICT"), "{stale}");
    let read = api.data(Some(&alice), AWAITING, json!({ "id": id })).await?;
    ensure_eq!(read["researchTask"]["awaiting"]["reason"], json!("PLAN_APPROVAL"), "{read}");
    // Approved as proposed (null subQueries): not edited.
    let approved = api.data(Some(&alice), APPROVE, json!({ "id": id })).await?;
    ensure_eq!(approved["approveResearchPlan"]["stage"], json!("RETRIEVING"));
    let resumed = payloads(&db, id_of(&id)?, ProgressEventType::Resumed).await?;
    ensure_eq!((&resumed[0]["edited"], &resumed[0]["timed_out"]), (&json!(false), &json!(false)));
    api.stop().await;
    Ok(())
}

/// The built-in engine, except that it asks a clarifying question whenever asked whether
/// to, and records the clarification each stage saw.
#[derive(Default)]
struct Asking {
    inner: BuiltinEngine,
    asked: AtomicUsize,
    seen: Mutex<Vec<(&'static str, Option<String>)>>,
}

impl Asking {
    fn saw(&self, stage: &'static str, ctx: &StageContext<'_>) {
        let answer = ctx.clarification.and_then(|clarification| clarification.answer.clone());
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((stage, answer));
    }
}

#[async_trait]
impl ResearchEngine for Asking {
    async fn clarify(&self, _ctx: &StageContext<'_>) -> Result<Staged<Option<String>>, EngineError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(Staged::new(Some("Which bees: honey bees or bumblebees?".to_owned()), CostReport::default()))
    }

    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError> {
        self.saw("planning", ctx);
        self.inner.plan(ctx).await
    }

    async fn retrieve(&self, ctx: &StageContext<'_>, plan: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError> {
        self.inner.retrieve(ctx, plan).await
    }

    async fn analyze(&self, ctx: &StageContext<'_>, found: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError> {
        self.inner.analyze(ctx, found).await
    }

    async fn generate(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Result<Staged<Answer>, EngineError> {
        self.saw("generating", ctx);
        self.inner.generate(ctx, evidence).await
    }
}

async fn a_clarification_is_asked_once_and_its_answer_reaches_the_plan_and_the_answer(
    db: TestDb,
) -> anyhow::Result<()> {
    let (api, space) = api_with_space(&db).await?;
    let alice = api.token("alice");
    let engine = Arc::new(Asking::default());
    let id = create(&api, &space, "How do bees make honey?", json!({ "clarify": true, "approve_plan": true })).await?;
    let task = id_of(&id)?;
    ensure_eq!(run(&db, Some(engine.clone()), now_millis()).await?, vec![RunOutcome::AwaitingInput]);
    let read = api.data(Some(&alice), AWAITING, json!({ "id": id })).await?;
    ensure_eq!(
        (&read["researchTask"]["awaiting"]["reason"], &read["researchTask"]["pausedFromStage"]),
        (&json!("CLARIFICATION"), &json!("PLANNING")),
        "{read}"
    );
    ensure_eq!(read["researchTask"]["awaiting"]["question"], json!("Which bees: honey bees or bumblebees?"));
    ensure_eq!(read["researchTask"]["awaiting"]["plan"], Value::Null);
    let paused = payloads(&db, task, ProgressEventType::Paused).await?;
    ensure_eq!(paused[0]["reason"], json!("clarification"));
    ensure_eq!(paused[0]["question"], json!("Which bees: honey bees or bumblebees?"));
    // Approving a plan now is the wrong input.
    let wrong = api.call(Some(&alice), APPROVE, json!({ "id": id })).await?;
    ensure!(wrong["errors"][0]["message"].as_str().is_some_and(|m| m.contains("waits for clarification")), "{wrong}");

    api.data(Some(&alice), ANSWER, json!({ "id": id, "a": "Honey bees, in a hive." })).await?;
    // Planning runs again, asks nothing more (the engine would), and waits for the plan.
    ensure_eq!(run(&db, Some(engine.clone()), now_millis()).await?, vec![RunOutcome::AwaitingInput]);
    ensure_eq!(engine.asked.load(Ordering::SeqCst), 1, "one clarification per task");
    api.data(Some(&alice), RESUME, json!({ "id": id })).await?;
    let outcomes = run(&db, Some(engine.clone()), now_millis()).await?;
    ensure!(matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]), "{outcomes:?}");
    let seen = engine.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let answer = Some("Honey bees, in a hive.".to_owned());
    ensure_eq!(seen, vec![("planning", answer.clone()), ("generating", answer)]);
    let resumed = payloads(&db, task, ProgressEventType::Resumed).await?;
    ensure_eq!(resumed.len(), 2);
    ensure_eq!(
        (&resumed[0]["reason"], &resumed[0]["answered"], &resumed[0]["timed_out"]),
        (&json!("clarification"), &json!(true), &json!(false))
    );
    // `resumeResearchTask` on a plan approval: as proposed, neither edited nor answered.
    ensure_eq!(
        (&resumed[1]["reason"], &resumed[1]["edited"], &resumed[1]["answered"]),
        (&json!("plan_approval"), &json!(false), &json!(false))
    );
    let waits = waits_of(&db, task).await?;
    let resolutions: Vec<Option<String>> = waits.iter().map(|w| w.resolution.clone()).collect();
    ensure_eq!(resolutions, vec![Some("answered".to_owned()), Some("resumed".to_owned())]);
    api.stop().await;
    Ok(())
}

/// A task of the fixture space's owner, created by the lifecycle with `limits`.
async fn lifecycle_task(db: &TestDb, limits: Value) -> anyhow::Result<job::Model> {
    let space = fixtures::space(db).await?;
    let owner = fixtures::member(db, &space, "owner", entity::MemberRole::Owner).await?;
    for (title, content) in DOCUMENTS {
        fixtures::document(db, &owner, title, content).await?;
    }
    let input = NewTask {
        mode: Some(ResearchMode::Research),
        limits: entity::TaskLimits::parse(&limits)?,
        ..fixtures::new_task(fixtures::member_grant(&owner, AccessChannel::Interactive), "How do bees make honey?")
    };
    Ok(lifecycle::create(&db.db, &Notifier::new(), input, now_millis()).await?.task)
}

fn task_ref(task: &job::Model, version: Option<i32>) -> TaskRef {
    TaskRef {
        id: task.id,
        tenant_id: task.tenant_id.clone(),
        subject_id: task.subject_id.clone(),
        expected_row_version: version,
    }
}

async fn a_wait_ends_by_resume_or_timeout_and_waiting_does_not_count_against_the_deadline(
    db: TestDb,
) -> anyhow::Result<()> {
    // A clarification that nobody answers: after input_timeout_ms a worker (any worker,
    // this one a fresh pipeline as after a restart) resumes it without an answer.
    let engine = Arc::new(Asking::default());
    let task = lifecycle_task(&db, json!({ "clarify": true, "input_timeout_ms": 60_000 })).await?;
    ensure_eq!(run(&db, Some(engine.clone()), now_millis()).await?, vec![RunOutcome::AwaitingInput]);
    let waiting = reload(&db, task.id).await?;
    ensure_eq!(run(&db, Some(engine.clone()), now_millis() + 30_000).await?, Vec::<RunOutcome>::new(), "not yet");
    let resume_after = waiting.resume_after.unwrap_or_default();
    let outcomes = run(&db, Some(engine.clone()), resume_after + 1).await?;
    ensure!(matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]), "{outcomes:?}");
    let resumed = payloads(&db, task.id, ProgressEventType::Resumed).await?;
    ensure_eq!(
        (&resumed[0]["reason"], &resumed[0]["answered"], &resumed[0]["timed_out"], &resumed[0]["automatic"]),
        (&json!("clarification"), &json!(false), &json!(true), &json!(true)),
        "{resumed:?}"
    );
    ensure_eq!(engine.asked.load(Ordering::SeqCst), 1);
    ensure_eq!(waits_of(&db, task.id).await?[0].resolution.as_deref(), Some("timed_out"));

    // A plan approval with a 5 s deadline that waited a minute: the wait does not count.
    let task = lifecycle_task(&db, json!({ "approve_plan": true, "deadline_ms": 5_000 })).await?;
    ensure_eq!(run(&db, None, now_millis()).await?, vec![RunOutcome::AwaitingInput]);
    // As if it was created, and began waiting, a minute ago.
    let minute_ago = now_millis() - 60_000;
    job::ActiveModel { id: Set(task.id), created_at: Set(minute_ago), ..Default::default() }.update(&db.db).await?;
    let open = waits_of(&db, task.id).await?.remove(0);
    wait::ActiveModel { id: Set(open.id), since: Set(minute_ago), ..Default::default() }.update(&db.db).await?;
    let resumed = lifecycle::resume(&db.db, &Notifier::new(), &task_ref(&task, None), now_millis()).await?;
    ensure_eq!(resumed.stage, Stage::Retrieving);
    let outcomes = run(&db, None, now_millis()).await?;
    ensure!(
        matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]),
        "the minute waited is not counted: {outcomes:?}"
    );
    let resumed = payloads(&db, task.id, ProgressEventType::Resumed).await?;
    ensure_eq!((&resumed[0]["edited"], &resumed[0]["timed_out"]), (&json!(false), &json!(false)));
    Ok(())
}

async fn approve_racing_cancel_or_another_approval_has_one_winner(db: TestDb) -> anyhow::Result<()> {
    let notifier = Notifier::new();
    for race in ["cancel", "approval"] {
        let task = lifecycle_task(&db, json!({ "approve_plan": true })).await?;
        ensure_eq!(run(&db, None, now_millis()).await?, vec![RunOutcome::AwaitingInput]);
        let waiting = reload(&db, task.id).await?;
        // Both sent with the row version they saw: exactly one lands.
        let at = task_ref(&waiting, Some(waiting.row_version));
        let approve = lifecycle::approve_plan(&db.db, &notifier, &at, Some(vec!["propolis".to_owned()]), now_millis());
        let other = async {
            if race == "cancel" {
                lifecycle::cancel(&db.db, &notifier, &at, now_millis()).await
            } else {
                lifecycle::approve_plan(&db.db, &notifier, &at, None, now_millis()).await
            }
        };
        let (first, second) = tokio::join!(approve, other);
        let stale = |result: &Result<job::Model, LifecycleError>| matches!(result, Err(LifecycleError::StaleRowVersion { expected, .. }) if *expected == waiting.row_version);
        ensure!(first.is_ok() != second.is_ok(), "{race}: one wins: {first:?} / {second:?}");
        ensure!(stale(&first) || stale(&second), "{race}: the loser is stale: {first:?} / {second:?}");
        let after = reload(&db, task.id).await?;
        ensure_eq!(after.row_version, waiting.row_version + 1, "{race}");
        let waits = waits_of(&db, task.id).await?;
        ensure_eq!(waits.len(), 1);
        let (resumed, canceled) = (
            payloads(&db, task.id, ProgressEventType::Resumed).await?.len(),
            payloads(&db, task.id, ProgressEventType::Canceled).await?.len(),
        );
        match (race, &first) {
            ("cancel", Err(_)) => {
                ensure_eq!((after.stage, resumed, canceled), (Stage::Canceled, 0, 1));
                ensure_eq!(waits[0].resolution.as_deref(), Some("canceled"));
                // Approving a canceled task: CONFLICT naming that it waits for nothing.
                let late = lifecycle::approve_plan(&db.db, &notifier, &task_ref(&task, None), None, now_millis()).await;
                ensure!(matches!(late, Err(LifecycleError::NotAwaiting { awaiting: None, .. })), "{late:?}");
            }
            (_, Ok(_)) => {
                ensure_eq!((after.stage, resumed, canceled), (Stage::Retrieving, 1, 0), "{race}");
                ensure_eq!(
                    waits[0].approved_plan.as_ref().map(lifecycle::plan_queries),
                    Some(vec!["propolis".to_owned()])
                );
            }
            (_, Err(_)) => {
                ensure_eq!((after.stage, resumed), (Stage::Retrieving, 1), "{race}");
                ensure_eq!(waits[0].resolution.as_deref(), Some("approved"));
            }
        }
        // Without row versions, the second approval finds no wait.
        if race == "approval" {
            let late = lifecycle::approve_plan(&db.db, &notifier, &task_ref(&task, None), None, now_millis()).await;
            ensure!(matches!(late, Err(LifecycleError::NotAwaiting { awaiting: None, .. })), "{late:?}");
        }
        // Whoever won, the task finishes (or stays canceled) with no wait left open. An
        // attempt that fails on a loaded machine (a pool or statement timeout) is retried
        // after its backoff, so later runs look past it.
        let mut outcomes = Vec::new();
        for attempt in 0..3 {
            outcomes.extend(run(&db, None, now_millis() + attempt * 10_000).await?);
            if reload(&db, task.id).await?.stage.is_terminal() {
                break;
            }
        }
        let ended = reload(&db, task.id).await?;
        ensure!(ended.stage.is_terminal(), "{race}: {:?} after {outcomes:?} ({:?})", ended.stage, ended.error);
    }
    ensure_eq!(worker::store::ops::awaiting_counts(&db.db).await?[0].1, 0);
    Ok(())
}

async fn approve_racing_the_timeout_ends_the_wait_once(db: TestDb) -> anyhow::Result<()> {
    let notifier = Notifier::new();
    let mut winners = Vec::new();
    for _ in 0..4 {
        let task = lifecycle_task(&db, json!({ "approve_plan": true, "input_timeout_ms": 60_000 })).await?;
        ensure_eq!(run(&db, None, now_millis()).await?, vec![RunOutcome::AwaitingInput]);
        let due = reload(&db, task.id).await?.resume_after.unwrap_or_default() + 1;
        // A worker past the timeout and a person approving, at once.
        let edited = Some(vec!["propolis".to_owned()]);
        let at = task_ref(&task, None);
        let approve = lifecycle::approve_plan(&db.db, &notifier, &at, edited, now_millis());
        let (approved, claimed) = tokio::join!(approve, run(&db, None, due));
        let claimed = claimed?;
        let waits = waits_of(&db, task.id).await?;
        let resumed = payloads(&db, task.id, ProgressEventType::Resumed).await?;
        ensure_eq!(resumed.len(), 1, "the wait ended once: {resumed:?}");
        match &approved {
            Ok(_) => ensure_eq!(waits[0].resolution.as_deref(), Some("approved")),
            Err(LifecycleError::NotAwaiting { .. }) => {
                ensure_eq!(waits[0].resolution.as_deref(), Some("timed_out"));
                ensure_eq!(resumed[0]["timed_out"], json!(true));
            }
            Err(other) => anyhow::bail!("the approval failed otherwise: {other}"),
        }
        // Whichever won, one worker runs the task to the end with the plan that won.
        let mut outcomes = claimed;
        outcomes.extend(run(&db, None, now_millis()).await?);
        ensure!(
            outcomes.iter().filter(|outcome| matches!(outcome, RunOutcome::Completed(_))).count() == 1,
            "{outcomes:?}"
        );
        let searched: Vec<Value> = crate::worker_support::partials(&db, task.id)
            .await?
            .into_iter()
            .filter(|row| {
                row.idempotency_key.starts_with("retrieval:") && !row.idempotency_key.starts_with("retrieval:r")
            })
            .map(|row| row.evidence_bundle["sub_query"].clone())
            .collect();
        ensure_eq!(approved.is_ok(), searched == vec![json!("propolis")], "{searched:?}");
        winners.push(approved.is_ok());
    }
    tracing::debug!(?winners, "approval won");
    Ok(())
}

/// The built-in engine, holding generation until released, so a note can arrive while
/// the task is being answered.
struct HeldAnswer {
    inner: BuiltinEngine,
    entered: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl ResearchEngine for HeldAnswer {
    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError> {
        self.inner.plan(ctx).await
    }

    async fn retrieve(&self, ctx: &StageContext<'_>, plan: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError> {
        self.inner.retrieve(ctx, plan).await
    }

    async fn analyze(&self, ctx: &StageContext<'_>, found: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError> {
        self.inner.analyze(ctx, found).await
    }

    async fn generate(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Result<Staged<Answer>, EngineError> {
        self.entered.notify_one();
        self.release.notified().await;
        self.inner.generate(ctx, evidence).await
    }
}

async fn a_note_racing_completion_lands_before_it_or_is_refused_after(db: TestDb) -> anyhow::Result<()> {
    let notifier = Notifier::new();
    // A note while the answer is written: refused (the answer read its notes when it began,
    // so the note would reach nothing), stored nowhere, and the task still completes.
    let task = lifecycle_task(&db, json!({})).await?;
    let (entered, release) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let engine =
        Arc::new(HeldAnswer { inner: BuiltinEngine::default(), entered: entered.clone(), release: release.clone() });
    let running = tokio::spawn({
        let db = db.clone();
        async move { run(&db, Some(engine), now_millis()).await }
    });
    entered.notified().await;
    let noted = lifecycle::steer(&db.db, &notifier, &task_ref(&task, None), "mention the hive", now_millis()).await;
    ensure!(matches!(noted, Err(LifecycleError::NotAllowed { current: Stage::Generating, .. })), "{noted:?}");
    release.notify_one();
    let outcomes = running.await??;
    ensure!(matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]), "{outcomes:?}");
    ensure_eq!(worker::store::notes::count(&db.db, task.id).await?, 0, "the refused note is stored nowhere");
    // A note racing the completion itself: it lands (kept) or is refused (stored nowhere),
    // while the answer is being written or once it is.
    let task = lifecycle_task(&db, json!({})).await?;
    let at = task_ref(&task, None);
    let (ran, noted) =
        tokio::join!(run(&db, None, now_millis()), lifecycle::steer(&db.db, &notifier, &at, "late note", now_millis()));
    let mut outcomes = ran?;
    if outcomes.is_empty() {
        // The claim skipped the row the note held locked (PostgreSQL's SKIP LOCKED): the
        // next one takes it.
        outcomes = run(&db, None, now_millis()).await?;
    }
    ensure!(matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]), "{outcomes:?}");
    let kept = worker::store::notes::count(&db.db, task.id).await?;
    match noted {
        Ok(_) => ensure_eq!(kept, 1),
        Err(LifecycleError::NotAllowed { current: Stage::Completed | Stage::Generating, .. }) => ensure_eq!(kept, 0),
        Err(other) => anyhow::bail!("the note failed otherwise: {other}"),
    }
    ensure_eq!(reload(&db, task.id).await?.stage, Stage::Completed);
    Ok(())
}

/// The `openai` engine against the stand-in model: it asks what an abbreviation stands
/// for, the answer reaches the planning and answering prompts, the plan waits for
/// approval and round 1 searches the edited plan.
async fn against_the_stand_in_a_clarification_and_an_edited_plan_are_what_the_model_and_retrieval_see(
    db: TestDb,
) -> anyhow::Result<()> {
    use crate::research_openai::{api, create, space_with_documents, wait_terminal};
    let server = kfs_tests::openai_server::OpenAiServer::start().await?;
    let api = api(&db, &server, |_| {}).await?;
    let (space, token) = space_with_documents(&api).await?;
    let limits =
        json!({ "mode": "RESEARCH", "topK": 2, "limits": { "clarify": true, "approve_plan": true, "max_rounds": 1 } });
    let id = create(&api, &token, &space, "How do bees make honey, according to the BBKA?", limits).await?;
    let task = id_of(&id)?;
    let awaiting = |reason: &'static str| {
        let (api, token, id) = (&api, token.clone(), id.clone());
        async move {
            kfs_tests::process::wait_until(std::time::Duration::from_secs(30), reason, async || {
                let read = api.data(Some(&token), AWAITING, json!({ "id": id })).await?;
                Ok(read["researchTask"]["awaiting"]["reason"] == json!(reason))
            })
            .await?;
            api.data(Some(&token), AWAITING, json!({ "id": id })).await
        }
    };
    let read = awaiting("CLARIFICATION").await?;
    ensure_eq!(read["researchTask"]["awaiting"]["question"], json!("What does BBKA stand for here?"), "{read}");
    let answer = "The British Beekeepers Association; keep to how worker bees process nectar.";
    api.data(Some(&token), ANSWER, json!({ "id": id, "a": answer })).await?;
    let read = awaiting("PLAN_APPROVAL").await?;
    let proposed = read["researchTask"]["awaiting"]["plan"].clone();
    ensure!(proposed.as_array().is_some_and(|plan| !plan.is_empty()), "{read}");
    let edited = json!(["wax glands", "nectar enzymes"]);
    api.data(Some(&token), APPROVE, json!({ "id": id, "q": edited })).await?;
    let row = wait_terminal(&db, &id).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);

    // One clarification asked; the answer is in the plan's and the answer's prompts.
    let seen = server.seen();
    let system_of = |index: usize| seen[index].body["messages"][0]["content"].as_str().unwrap_or_default().to_owned();
    let user_of = |index: usize| seen[index].body["messages"][1]["content"].as_str().unwrap_or_default().to_owned();
    let asked: Vec<usize> = (0..seen.len()).filter(|&i| system_of(i).contains("\"ambiguous\"")).collect();
    ensure_eq!(asked, vec![0], "one clarifying question, first");
    let planned: Vec<usize> = (0..seen.len()).filter(|&i| system_of(i).contains("sub_queries")).collect();
    ensure!(planned.len() == 1 && user_of(planned[0]).contains("British Beekeepers"), "{:?}", planned);
    let answered = seen.len() - 1;
    ensure!(user_of(answered).contains("British Beekeepers"), "the answer's prompt: {}", user_of(answered));
    // Round 1 searched the edited plan.
    let searched: Vec<Value> = crate::worker_support::partials(&db, task)
        .await?
        .into_iter()
        .filter(|row| row.idempotency_key.starts_with("retrieval:"))
        .map(|row| row.evidence_bundle["sub_query"].clone())
        .collect();
    ensure_eq!(json!(searched), edited);
    let trace = crate::research_openai::trace(&api, &token, &id).await?;
    let titles: Vec<&str> =
        trace["answerTrace"]["evidence"].as_array().into_iter().flatten().filter_map(|e| e["title"].as_str()).collect();
    ensure!(titles.contains(&"Wax"), "the edited plan's passage is cited: {trace}");
    api.stop().await;
    Ok(())
}
