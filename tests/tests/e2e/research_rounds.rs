//! Research in rounds, with the built-in engine (no model): after each round the evidence
//! kept so far is read, and a question word it lacks is searched in the next round; the
//! loop stops when the question is covered, at the round limit, when a round finds nothing
//! new or has nothing new to search, or when another round would not fit in the budget or
//! before the deadline, and the task still answers. Every round's boundaries are keyed by
//! round, and a worker that dies mid-round resumes at that round.
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::ensure;
use entity::{AccessChannel, ResearchMode, Stage, answer_trace, now_millis, research_task_job as job};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use tokio::sync::Notify;
use worker::Notifier;
use worker::lifecycle::{NewTask, create};
use worker::pipeline::{RunOutcome, Stop};
use worker::research::engine::{
    Answer, BuiltinEngine, EngineError, Passage, Plan, ResearchEngine, Retrieval, StageContext, Staged, async_trait,
};
use worker::runtime::run_due;

use crate::worker_support::{assert_gapless, events, partials, pipeline, reload};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_second_round_searches_what_the_first_left_uncovered_and_the_answer_cites_both,
        each_way_a_loop_stops_is_recorded_and_the_task_still_answers,
        a_round_that_would_not_fit_in_the_budget_is_not_run,
        a_round_that_would_not_end_before_the_deadline_is_not_run,
        a_worker_that_dies_in_round_two_resumes_there_without_repeating_round_one,
    ]
}

/// Three documents; the question's words are split between the first two.
const DOCUMENTS: &[(&str, &str)] = &[
    ("Honey", "Bees turn nectar into honey by evaporation."),
    ("Propolis", "Propolis is a resin that bees use to seal the hive."),
    ("Gardening", "Tomatoes need sun and regular watering."),
];

/// A question whose words no single document holds: "use" and "propolis" are in the
/// second document, the rest in the first.
const SPLIT_QUESTION: &str = "How do bees turn nectar into honey and use propolis?";

async fn space(db: &TestDb) -> anyhow::Result<entity::member::Model> {
    let space = fixtures::space(db).await?;
    let owner = fixtures::member(db, &space, "owner", entity::MemberRole::Owner).await?;
    for (title, content) in DOCUMENTS {
        fixtures::document(db, &owner, title, content).await?;
    }
    Ok(owner)
}

/// A task of `owner`'s keeping `top_k` passages per round.
async fn task(
    db: &TestDb,
    notifier: &Notifier,
    owner: &entity::member::Model,
    query: &str,
    top_k: i32,
    budget_usd: Option<f64>,
    limits: Value,
) -> anyhow::Result<job::Model> {
    let input = NewTask {
        mode: Some(ResearchMode::Fast),
        top_k: Some(top_k),
        budget_usd,
        limits: entity::TaskLimits::parse(&limits)?,
        ..fixtures::new_task(fixtures::member_grant(owner, AccessChannel::Interactive), query)
    };
    Ok(create(&db.db, notifier, input, now_millis()).await?.task)
}

/// Runs the due task to its end with `engine` (the built-in one when `None`).
async fn run(db: &TestDb, notifier: &Notifier, engine: Option<Arc<dyn ResearchEngine>>) -> anyhow::Result<()> {
    let (_, outcomes) = run_due(&pipeline(db, notifier, "rounds", engine), &Stop::default(), now_millis()).await?;
    ensure!(matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]), "{outcomes:?}");
    Ok(())
}

/// The payload of the event that ended each round, in order.
async fn round_ends(db: &TestDb, task: &job::Model) -> anyhow::Result<Vec<Value>> {
    Ok(events(db, task.id)
        .await?
        .into_iter()
        .filter(|event| event.payload.get("decision").is_some())
        .map(|event| event.payload)
        .collect())
}

async fn trace(db: &TestDb, task: &job::Model) -> anyhow::Result<answer_trace::Model> {
    answer_trace::Entity::find()
        .filter(answer_trace::Column::ResearchTaskId.eq(task.id))
        .one(&db.db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no answer trace"))
}

fn titles(trace: &answer_trace::Model) -> Vec<String> {
    trace
        .evidence
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item["title"].as_str().map(str::to_owned))
        .collect()
}

async fn a_second_round_searches_what_the_first_left_uncovered_and_the_answer_cites_both(
    db: TestDb,
) -> anyhow::Result<()> {
    let owner = space(&db).await?;
    let notifier = Notifier::new();
    // One passage per round: round 1 keeps the honey passage, which lacks "use" and
    // "propolis"; FAST searches one sub-query a round, so round 2 searches "use".
    let asked = task(&db, &notifier, &owner, SPLIT_QUESTION, 1, None, json!({ "max_rounds": 3 })).await?;
    run(&db, &notifier, None).await?;

    let journal = events(&db, asked.id).await?;
    let keys: Vec<&str> = journal.iter().map(|event| event.idempotency_key.as_str()).collect();
    ensure_eq!(
        keys,
        [
            "started",
            "stage:retrieving",
            "stage:analyzing",
            "stage:retrieving:r2",
            "stage:analyzing:r2",
            "stage:generating",
            "stage:completed"
        ]
    );
    assert_gapless("progress", &journal.iter().map(|event| event.sequence).collect::<Vec<_>>())?;
    let ends = round_ends(&db, &asked).await?;
    ensure_eq!(ends.len(), 2, "{ends:?}");
    ensure_eq!(
        (&ends[0]["round"], &ends[0]["queries"], &ends[0]["new_evidence"], &ends[0]["decision"]),
        (&json!(1), &json!([SPLIT_QUESTION]), &json!(1), &json!("continue"))
    );
    ensure_eq!(ends[0]["plan"]["sub_queries"], json!(["use"]), "round 2's plan is the first uncovered word");
    ensure_eq!(
        (&ends[1]["round"], &ends[1]["queries"], &ends[1]["new_evidence"], &ends[1]["decision"]),
        (&json!(2), &json!(["use"]), &json!(1), &json!("answered"))
    );
    let keys: Vec<String> = partials(&db, asked.id).await?.into_iter().map(|row| row.idempotency_key).collect();
    ensure_eq!(keys, ["retrieval:1", "evidence", "retrieval:r2:1", "evidence:r2"]);

    // The answer is written from the union of both rounds, each passage once.
    let written = trace(&db, &asked).await?;
    let mut cited = titles(&written);
    cited.sort();
    ensure_eq!(cited, ["Honey", "Propolis"], "{}", written.answer);
    ensure!(written.answer.contains("[1]") && written.answer.contains("[2]"), "{}", written.answer);
    Ok(())
}

async fn each_way_a_loop_stops_is_recorded_and_the_task_still_answers(db: TestDb) -> anyhow::Result<()> {
    let owner = space(&db).await?;
    let notifier = Notifier::new();
    // (question, top_k, limits, the decision of each round)
    let cases: [(&str, i32, Value, &[&str]); 4] = [
        // FAST runs one round: no decision is asked.
        (SPLIT_QUESTION, 1, json!({}), &["max_rounds"]),
        // Both words are in the evidence of round 1.
        ("bees honey", 2, json!({ "max_rounds": 4 }), &["answered"]),
        // No document holds "jupiter": round 2 searches it and keeps nothing new.
        ("bees honey jupiter", 2, json!({ "max_rounds": 4 }), &["continue", "no_new_evidence"]),
        // The only uncovered word is the question itself, searched already.
        ("jupiter", 2, json!({ "max_rounds": 4 }), &["no_new_queries"]),
    ];
    for (query, top_k, limits, decisions) in cases {
        let asked = task(&db, &notifier, &owner, query, top_k, None, limits).await?;
        run(&db, &notifier, None).await?;
        let ends = round_ends(&db, &asked).await?;
        let seen: Vec<&str> = ends.iter().filter_map(|end| end["decision"].as_str()).collect();
        ensure_eq!(seen, decisions, "{query}: {ends:?}");
        let rounds: Vec<Value> = ends.iter().map(|end| end["round"].clone()).collect();
        let expected: Vec<Value> = (1..=decisions.len()).map(|round| json!(round)).collect();
        ensure_eq!(rounds, expected, "{query}");
        let row = reload(&db, asked.id).await?;
        ensure_eq!(row.stage, Stage::Completed, "{query}: {:?}", row.error);
        let written = trace(&db, &asked).await?;
        if query == "jupiter" {
            ensure_eq!(written.answer, worker::research::engine::NO_EVIDENCE_ANSWER);
        } else {
            ensure!(written.answer.contains("[1]"), "{query}: {}", written.answer);
        }
    }
    Ok(())
}

async fn a_round_that_would_not_fit_in_the_budget_is_not_run(db: TestDb) -> anyhow::Result<()> {
    let owner = space(&db).await?;
    let notifier = Notifier::new();
    // At the built-in prices a plan, one round and the answer cost about $0.00015; another
    // round (20 candidates as long as the longest passage, read twice) about $0.0007.
    let budget = 0.0003;
    let asked = task(&db, &notifier, &owner, SPLIT_QUESTION, 1, Some(budget), json!({ "max_rounds": 3 })).await?;
    run(&db, &notifier, None).await?;
    let ends = round_ends(&db, &asked).await?;
    let seen: Vec<&str> = ends.iter().filter_map(|end| end["decision"].as_str()).collect();
    ensure_eq!(seen, ["budget"], "{ends:?}");
    let row = reload(&db, asked.id).await?;
    ensure_eq!(row.stage, Stage::Completed, "{:?}", row.error);
    let spent = row.cost["usd"].as_f64().unwrap_or_default();
    ensure!(spent > 0.0 && spent <= budget, "spent {spent} of {budget}");
    ensure_eq!(titles(&trace(&db, &asked).await?), ["Honey"]);
    Ok(())
}

async fn a_round_that_would_not_end_before_the_deadline_is_not_run(db: TestDb) -> anyhow::Result<()> {
    let owner = space(&db).await?;
    let notifier = Notifier::new();
    // Planning takes 1.5 s, so a round is expected to take that long and another round plus
    // the answer (3 s) would end after the 4 s deadline; the answer itself is quick.
    let engine = Counting::new(None, Duration::from_millis(1_500));
    let limits = json!({ "max_rounds": 3, "deadline_ms": 4_000 });
    let asked = task(&db, &notifier, &owner, SPLIT_QUESTION, 1, None, limits).await?;
    run(&db, &notifier, Some(engine)).await?;
    let ends = round_ends(&db, &asked).await?;
    let seen: Vec<&str> = ends.iter().filter_map(|end| end["decision"].as_str()).collect();
    ensure_eq!(seen, ["deadline"], "{ends:?}");
    ensure_eq!(reload(&db, asked.id).await?.stage, Stage::Completed);
    Ok(())
}

async fn a_worker_that_dies_in_round_two_resumes_there_without_repeating_round_one(db: TestDb) -> anyhow::Result<()> {
    let owner = space(&db).await?;
    let notifier = Notifier::new();
    let limits = json!({ "max_rounds": 3 });
    let clean = task(&db, &notifier, &owner, SPLIT_QUESTION, 1, None, limits.clone()).await?;
    run(&db, &notifier, None).await?;
    let clean_keys: Vec<String> = events(&db, clean.id).await?.into_iter().map(|event| event.idempotency_key).collect();

    for at in [Stage::Retrieving, Stage::Analyzing] {
        let asked = task(&db, &notifier, &owner, SPLIT_QUESTION, 1, None, limits.clone()).await?;
        // The second time the engine enters `at` (round 2), the process hangs, then dies.
        let doomed_engine = Counting::new(Some((at, 2)), Duration::ZERO);
        let doomed = pipeline(&db, &notifier, "doomed", Some(doomed_engine.clone()));
        let running = tokio::spawn(async move { run_due(&doomed, &Stop::default(), now_millis()).await });
        doomed_engine.entered.notified().await;
        running.abort();
        let _ = running.await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        let crashed = reload(&db, asked.id).await?;
        ensure_eq!(crashed.stage, at);

        let rescuer_engine = Counting::new(None, Duration::ZERO);
        let rescuer = pipeline(&db, &notifier, "rescuer", Some(rescuer_engine.clone()));
        let later = crashed.lease_expires_at.unwrap_or_default() + 1;
        let (_, outcomes) = run_due(&rescuer, &Stop::default(), later).await?;
        ensure!(matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]), "{at:?}: {outcomes:?}");
        // No plan again, no round-1 retrieval again: only what round 2 had left.
        let expected = if at == Stage::Retrieving { [0, 1, 1, 1] } else { [0, 0, 1, 1] };
        ensure_eq!(rescuer_engine.counts(), expected, "{at:?}: plan, retrieve, analyze, generate");

        let journal = events(&db, asked.id).await?;
        let keys: Vec<String> = journal.iter().map(|event| event.idempotency_key.clone()).collect();
        ensure_eq!(keys, clean_keys, "{at:?}");
        assert_gapless("progress", &journal.iter().map(|event| event.sequence).collect::<Vec<_>>())?;
        let rows = partials(&db, asked.id).await?;
        assert_gapless("partial", &rows.iter().map(|row| row.sequence).collect::<Vec<_>>())?;
        let mut cited = titles(&trace(&db, &asked).await?);
        cited.sort();
        ensure_eq!(cited, ["Honey", "Propolis"], "{at:?}");
    }
    Ok(())
}

/// The built-in engine, counting the calls of each stage; it may plan slowly, and may hang
/// the n-th time it enters one stage (telling the test first).
struct Counting {
    inner: BuiltinEngine,
    calls: [AtomicU32; 4],
    hang: Option<(Stage, u32)>,
    plan_delay: Duration,
    entered: Notify,
}

impl Counting {
    fn new(hang: Option<(Stage, u32)>, plan_delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            inner: BuiltinEngine::default(),
            calls: Default::default(),
            hang,
            plan_delay,
            entered: Notify::new(),
        })
    }

    fn counts(&self) -> [u32; 4] {
        self.calls.each_ref().map(|count| count.load(Ordering::SeqCst))
    }

    async fn enter(&self, stage: Stage, slot: usize) {
        let time = self.calls[slot].fetch_add(1, Ordering::SeqCst) + 1;
        if self.hang == Some((stage, time)) {
            self.entered.notify_one();
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait]
impl ResearchEngine for Counting {
    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError> {
        self.enter(Stage::Planning, 0).await;
        tokio::time::sleep(self.plan_delay).await;
        self.inner.plan(ctx).await
    }

    async fn retrieve(&self, ctx: &StageContext<'_>, plan: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError> {
        self.enter(Stage::Retrieving, 1).await;
        self.inner.retrieve(ctx, plan).await
    }

    async fn analyze(&self, ctx: &StageContext<'_>, found: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError> {
        self.enter(Stage::Analyzing, 2).await;
        self.inner.analyze(ctx, found).await
    }

    async fn generate(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Result<Staged<Answer>, EngineError> {
        self.enter(Stage::Generating, 3).await;
        self.inner.generate(ctx, evidence).await
    }
}
