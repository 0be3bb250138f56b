//! Steering: a person adds notes to a queued, running or paused task; the notes are
//! bounded, checked before the task's state, readable by whoever may read the task, and
//! the next round's decision and the answer take them into account. A note racing the
//! task's completion either lands before it (and is applied) or is refused after it.
use anyhow::ensure;
use entity::{AccessChannel, ResearchMode, Stage, now_millis};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use worker::Notifier;
use worker::lifecycle::{self, LifecycleError, NewTask, TaskRef};
use worker::pipeline::{RunOutcome, Stop};
use worker::runtime::run_due;

use crate::api_support::{Api, CANCEL, string_at};
use crate::worker_support::{events, pipeline, reload};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        notes_are_checked_bounded_and_readable_by_whoever_may_read_the_task,
        a_note_steers_the_next_round_and_the_answer,
        concurrent_notes_stop_at_the_limit_and_a_note_after_completion_is_refused,
        a_note_while_the_answer_is_being_written_is_refused_with_conflict,
    ]
}

async fn a_note_while_the_answer_is_being_written_is_refused_with_conflict(db: TestDb) -> anyhow::Result<()> {
    use sea_orm::{ActiveModelTrait as _, ActiveValue::Set, IntoActiveModel as _};
    let api = Api::start(&db).await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let task = api.task(&token, &space).await?;
    let id = string_at(&task, "/id")?;
    // The worker is generating the answer (its notes were read when the stage began).
    let row = reload(&db, id.parse()?).await?;
    let mut generating = row.into_active_model();
    generating.stage = Set(Stage::Generating);
    generating.update(&db.db).await?;
    let body = api.call(Some(&token), STEER, json!({ "id": id, "note": "mention neap tides" })).await?;
    ensure_eq!(kfs_tests::server::first_error_code(&body).as_deref(), Some("CONFLICT"));
    let message = body.pointer("/errors/0/message").and_then(Value::as_str).unwrap_or_default();
    ensure!(message.contains("already being written"), "{body}");
    ensure_eq!(worker::store::notes::count(&db.db, id.parse()?).await?, 0);
    api.stop().await;
    Ok(())
}

const STEER: &str = "mutation($id: UUID!, $note: String!, $v: Int) { \
    steerResearchTask(id: $id, note: $note, expectedRowVersion: $v) { id rowVersion steeringNotes { text } } }";
const NOTES: &str = "query($id: UUID!) { researchTask(id: $id) { rowVersion steeringNotes { text createdAt } } }";

async fn notes_are_checked_bounded_and_readable_by_whoever_may_read_the_task(db: TestDb) -> anyhow::Result<()> {
    let api = Api::start(&db).await?;
    let (alice, bob) = (api.token("alice"), api.token("bob"));
    let space = api.space("alice").await?;
    api.member("alice", &space, "bob", "EDITOR").await?;
    let task = string_at(&api.task(&alice, &space).await?, "/id")?;
    let steer = |note: Value, version: Value| json!({ "id": task, "note": note, "v": version });

    // The input first: a blank or too long note is BAD_USER_INPUT whatever the row version.
    for note in [json!(""), json!("   "), json!("x".repeat(2_001))] {
        ensure_eq!(api.code(Some(&alice), STEER, steer(note.clone(), json!(99))).await?, "BAD_USER_INPUT", "{note}");
    }
    ensure_eq!(api.code(Some(&alice), STEER, steer(json!("focus on wax"), json!(99))).await?, "CONFLICT");
    // Another subject's task, and a random id, answer alike.
    ensure_eq!(api.code(Some(&bob), STEER, steer(json!("focus on wax"), Value::Null)).await?, "NOT_FOUND");
    let random = json!({ "id": uuid::Uuid::new_v4(), "note": "focus", "v": Value::Null });
    ensure_eq!(api.code(Some(&alice), STEER, random).await?, "NOT_FOUND");

    // Eight notes, each bumping the row version; a 9th is refused naming the limit.
    let mut version = 1;
    for n in 1..=8 {
        let note = if n == 8 { "é".repeat(2_000) } else { format!("note {n}") };
        let data = api.data(Some(&alice), STEER, steer(json!(note), json!(version))).await?;
        ensure_eq!(data["steerResearchTask"]["rowVersion"], json!(version + 1));
        version += 1;
    }
    let ninth = api.call(Some(&alice), STEER, steer(json!("one more"), json!(version))).await?;
    ensure_eq!(ninth["errors"][0]["extensions"]["code"], json!("BAD_USER_INPUT"), "{ninth}");
    ensure!(ninth["errors"][0]["message"].as_str().is_some_and(|message| message.contains("at most 8")), "{ninth}");
    let read = api.data(Some(&alice), NOTES, json!({ "id": task })).await?;
    ensure_eq!(read["researchTask"]["rowVersion"], json!(9), "the refused note changed nothing");
    let texts: Vec<&str> = read["researchTask"]["steeringNotes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["text"].as_str())
        .collect();
    ensure_eq!(texts.len(), 8);
    ensure_eq!(&texts[..2], ["note 1", "note 2"], "oldest first");

    // A finished task takes no note (CONFLICT with its stage), but a bad note is still BAD_USER_INPUT.
    let other = string_at(&api.task(&alice, &space).await?, "/id")?;
    api.data(Some(&alice), CANCEL, json!({ "id": other })).await?;
    let refused = api.call(Some(&alice), STEER, json!({ "id": other, "note": "too late" })).await?;
    ensure_eq!(refused["errors"][0]["extensions"]["code"], json!("CONFLICT"), "{refused}");
    ensure_eq!(refused["errors"][0]["extensions"]["currentStage"], json!("CANCELED"), "{refused}");
    ensure_eq!(api.code(Some(&alice), STEER, json!({ "id": other, "note": "" })).await?, "BAD_USER_INPUT");
    api.stop().await;
    Ok(())
}

/// Three documents; the question's words are all in the first, the note's first word in the second.
const DOCUMENTS: &[(&str, &str)] = &[
    ("Honey", "Bees turn nectar into honey by evaporation."),
    ("Propolis", "Propolis is a resin that bees use to seal the hive."),
    ("Gardening", "Tomatoes need sun and regular watering."),
];

async fn a_note_steers_the_next_round_and_the_answer(db: TestDb) -> anyhow::Result<()> {
    let space = fixtures::space(&db).await?;
    let owner = fixtures::member(&db, &space, "owner", entity::MemberRole::Owner).await?;
    for (title, content) in DOCUMENTS {
        fixtures::document(&db, &owner, title, content).await?;
    }
    let notifier = Notifier::new();
    let mut ends = Vec::new();
    for note in [None, Some("Propolis: say what bees use it for.")] {
        let input = NewTask {
            mode: Some(ResearchMode::Fast),
            top_k: Some(1),
            limits: entity::TaskLimits::parse(&json!({ "max_rounds": 2 }))?,
            ..fixtures::new_task(
                fixtures::member_grant(&owner, AccessChannel::Interactive),
                "How do bees turn nectar into honey?",
            )
        };
        let task = lifecycle::create(&db.db, &notifier, input, now_millis()).await?.task;
        if let Some(note) = note {
            lifecycle::steer(&db.db, &notifier, &task_ref(&task), note, now_millis()).await?;
        }
        let (_, outcomes) = run_due(&pipeline(&db, &notifier, "steered", None), &Stop::default(), now_millis()).await?;
        ensure!(matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]), "{outcomes:?}");
        let end: Vec<Value> = events(&db, task.id)
            .await?
            .into_iter()
            .filter(|event| event.payload.get("decision").is_some())
            .map(|event| event.payload)
            .collect();
        let trace = entity::answer_trace::Entity::find()
            .filter(entity::answer_trace::Column::ResearchTaskId.eq(task.id))
            .one(&db.db)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no trace"))?;
        ends.push((end, trace.answer));
    }
    // Without a note the honey passage answers the question after round 1.
    let (plain, plain_answer) = &ends[0];
    ensure_eq!((&plain[0]["decision"], &plain[0]["notes_applied"]), (&json!("answered"), &json!(0)), "{plain:?}");
    ensure!(!plain_answer.contains("resin"), "{plain_answer}");
    // With it, the note's first uncovered word is searched in round 2 (FAST searches one
    // sub-query a round) and the answer covers it.
    let (steered, steered_answer) = &ends[1];
    ensure_eq!(
        (&steered[0]["decision"], &steered[0]["notes_applied"], &steered[0]["plan"]["sub_queries"]),
        (&json!("continue"), &json!(1), &json!(["propolis"])),
        "{steered:?}"
    );
    ensure_eq!((steered.len(), &steered[1]["decision"]), (2, &json!("max_rounds")), "{steered:?}");
    ensure!(steered_answer.contains("resin"), "the answer covers the note: {steered_answer}");
    Ok(())
}

fn task_ref(task: &entity::research_task_job::Model) -> TaskRef {
    TaskRef {
        id: task.id,
        tenant_id: task.tenant_id.clone(),
        subject_id: task.subject_id.clone(),
        expected_row_version: None,
    }
}

async fn concurrent_notes_stop_at_the_limit_and_a_note_after_completion_is_refused(db: TestDb) -> anyhow::Result<()> {
    let space = fixtures::space(&db).await?;
    let owner = fixtures::member(&db, &space, "owner", entity::MemberRole::Owner).await?;
    fixtures::document(&db, &owner, "Honey", "Bees turn nectar into honey.").await?;
    let notifier = Notifier::new();
    let grant = || fixtures::member_grant(&owner, AccessChannel::Interactive);
    let task =
        lifecycle::create(&db.db, &notifier, fixtures::new_task(grant(), "How do bees make honey?"), now_millis())
            .await?
            .task;

    // Twelve notes at once: exactly eight land, each once, and the row version counts them.
    let mut running = Vec::new();
    for n in 0..12 {
        let (db, notifier, task) = (db.db.clone(), notifier.clone(), task_ref(&task));
        running.push(tokio::spawn(async move {
            lifecycle::steer(&db, &notifier, &task, &format!("note {n}"), now_millis()).await
        }));
    }
    let (mut landed, mut refused) = (0, 0);
    for handle in running {
        match handle.await? {
            Ok(_) => landed += 1,
            Err(LifecycleError::TooManyNotes(8)) => refused += 1,
            Err(other) => anyhow::bail!("a note failed otherwise: {other}"),
        }
    }
    ensure_eq!((landed, refused), (8, 4));
    ensure_eq!(worker::store::notes::count(&db.db, task.id).await?, 8);
    ensure_eq!(reload(&db, task.id).await?.row_version, task.row_version + 8);

    // The task completes; a note after that is refused and stored nowhere.
    let (_, outcomes) = run_due(&pipeline(&db, &notifier, "racer", None), &Stop::default(), now_millis()).await?;
    ensure!(matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]), "{outcomes:?}");
    let late = lifecycle::steer(&db.db, &notifier, &task_ref(&task), "too late", now_millis()).await;
    ensure!(matches!(late, Err(LifecycleError::TooManyNotes(_))), "the limit is checked before the stage: {late:?}");
    let fresh =
        lifecycle::create(&db.db, &notifier, fixtures::new_task(grant(), "How do bees make honey?"), now_millis())
            .await?
            .task;
    let (_, outcomes) = run_due(&pipeline(&db, &notifier, "racer", None), &Stop::default(), now_millis()).await?;
    ensure!(matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]), "{outcomes:?}");
    let late = lifecycle::steer(&db.db, &notifier, &task_ref(&fresh), "too late", now_millis()).await;
    ensure!(matches!(late, Err(LifecycleError::NotAllowed { current: Stage::Completed, .. })), "{late:?}");
    ensure_eq!(worker::store::notes::count(&db.db, fresh.id).await?, 0);
    Ok(())
}
