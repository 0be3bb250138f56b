//! What the worker tests share: settings that make leases and heartbeats fast, a space
//! with documents to research, and a scripted engine that stops or changes the world at a
//! chosen stage.
use std::sync::Arc;

use entity::{
    MemberRole, ResearchMode, Stage, api_key, member, now_millis, research_task_job as job,
    research_task_partial_result as partial, research_task_progress_event as progress,
};
use kfs_tests::{TestDb, fixtures};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};
use tokio::sync::Notify;
use uuid::Uuid;
use worker::grant::{GrantRequest, GrantSource};
use worker::lifecycle::{NewTask, create};
use worker::pipeline::Pipeline;
use worker::research::engine::{
    Answer, BuiltinEngine, EngineError, Passage, Plan, ResearchEngine, Retrieval, StageContext, Staged, async_trait,
};
use worker::{Notifier, WorkerSettings};

/// Settings for tests: a heartbeat every 20 ms, so a lost lease is noticed at once.
pub fn settings(worker_id: &str) -> WorkerSettings {
    WorkerSettings {
        worker_id: worker_id.to_owned(),
        heartbeat_ms: 20,
        poll_interval_ms: 50,
        retry_base_ms: 1_000,
        retry_cap_ms: 8_000,
        outbox_max_attempts: 3,
        shutdown_grace_ms: 0,
        ..WorkerSettings::default()
    }
}

/// A pipeline for `worker_id` with `engine` (the built-in one when `None`).
pub fn pipeline(
    db: &TestDb,
    notifier: &Notifier,
    worker_id: &str,
    engine: Option<Arc<dyn ResearchEngine>>,
) -> Pipeline {
    let settings = settings(worker_id);
    let engine = engine.unwrap_or_else(|| Arc::new(BuiltinEngine::new(settings.engine.clone())));
    let settings = Arc::new(settings);
    let clock = entity::Clock::system();
    Pipeline {
        db: db.db.clone(),
        notifier: notifier.clone(),
        engine,
        retriever: worker::knowledge::retrieve::Retriever::from_settings(&settings.embeddings)
            .expect("the test settings' embeddings endpoint is valid"),
        settings: settings.clone(),
        clock: clock.clone(),
        fairness: Arc::default(),
        keeper: worker::pipeline::LeaseKeeper::start(db.db.clone(), notifier, settings, clock),
        committer: worker::pipeline::BoundaryCommitter::start(db.db.clone(), notifier.clone()),
    }
}

/// The documents every research fixture space holds.
pub const DOCUMENTS: &[(&str, &str)] = &[
    (
        "Leases",
        "A lease is a time-bounded claim on a job. A worker renews its lease with heartbeats while a stage runs.",
    ),
    (
        "Fencing tokens",
        "Every write carries the lease token. A stale worker whose lease expired writes nothing, because the token no longer matches.",
    ),
    (
        "Retry backoff",
        "Failed attempts are retried with exponential backoff and jitter, so workers that failed together do not retry together.",
    ),
    ("Gardening", "Tomatoes need sun and regular watering; basil grows well beside them."),
];

/// A space with an owner and [`DOCUMENTS`].
pub async fn space_with_documents(
    db: &TestDb,
) -> anyhow::Result<(entity::knowledge_space::Model, member::Model, Vec<Uuid>)> {
    let space = fixtures::space(db).await?;
    let owner = fixtures::member(db, &space, "owner", MemberRole::Owner).await?;
    let mut ids = Vec::new();
    for (title, content) in DOCUMENTS {
        ids.push(fixtures::document(db, &owner, title, content).await?.id);
    }
    Ok((space, owner, ids))
}

/// What a test task asks for.
pub struct Ask {
    /// The question.
    pub query: &'static str,
    /// The mode.
    pub mode: Option<ResearchMode>,
    /// The budget.
    pub budget_usd: Option<f64>,
    /// The limits.
    pub limits: Value,
}

impl Default for Ask {
    fn default() -> Self {
        Self {
            query: "How does a lease token fence a stale worker, and why use backoff with jitter?",
            mode: Some(ResearchMode::Research),
            budget_usd: Some(1.0),
            limits: json!({}),
        }
    }
}

/// Creates a task through the lifecycle, as the API does, under `grant`.
pub async fn create_task(
    db: &TestDb,
    notifier: &Notifier,
    grant: GrantRequest,
    ask: Ask,
) -> anyhow::Result<job::Model> {
    let input = NewTask {
        mode: ask.mode,
        top_k: Some(3),
        budget_usd: ask.budget_usd,
        limits: entity::TaskLimits::parse(&ask.limits)?,
        ..fixtures::new_task(grant, ask.query)
    };
    Ok(create(&db.db, notifier, input, entity::now_millis()).await?.task)
}

/// The grant of an API key of the space.
pub fn key_grant(key: &api_key::Model) -> GrantRequest {
    GrantRequest {
        tenant_id: key.tenant_id.clone(),
        knowledge_space_id: key.knowledge_space_id,
        subject_id: key.subject_id(),
        access_channel: entity::AccessChannel::ServiceApi,
        source: GrantSource::ApiKey { key_id: key.id, revision: key.revision, expires_at: key.expires_at },
    }
}

/// The task's row now.
pub async fn reload(db: &TestDb, id: Uuid) -> anyhow::Result<job::Model> {
    job::Entity::find_by_id(id).one(&db.db).await?.ok_or_else(|| anyhow::anyhow!("task {id} vanished"))
}

/// The task's progress events in sequence order.
pub async fn events(db: &TestDb, id: Uuid) -> anyhow::Result<Vec<progress::Model>> {
    Ok(progress::Entity::find()
        .filter(progress::Column::ResearchTaskJobId.eq(id))
        .order_by_asc(progress::Column::Sequence)
        .all(&db.db)
        .await?)
}

/// The task's partial results in sequence order.
pub async fn partials(db: &TestDb, id: Uuid) -> anyhow::Result<Vec<partial::Model>> {
    Ok(partial::Entity::find()
        .filter(partial::Column::ResearchTaskJobId.eq(id))
        .order_by_asc(partial::Column::Sequence)
        .all(&db.db)
        .await?)
}

/// Fails unless `sequences` is exactly 1, 2, …, n.
pub fn assert_gapless(what: &str, sequences: &[i32]) -> anyhow::Result<()> {
    let expected: Vec<i32> = (1..=sequences.len() as i32).collect();
    anyhow::ensure!(sequences == expected, "{what} sequences are {sequences:?}, expected {expected:?}");
    Ok(())
}

/// What the scripted engine does when it reaches its stage.
#[derive(Clone)]
pub enum Act {
    /// Tell the test, then never finish (a hung stage, or a crash if the test drops it).
    Block,
    /// Revoke this API key, then run the stage.
    RevokeKey(Uuid),
    /// Remove this member (as the API does: removed_at and a new revision), then run the stage.
    RemoveMember(Uuid),
}

/// The built-in engine, except at one stage, where it does `act`.
pub struct Scripted {
    inner: BuiltinEngine,
    at: Stage,
    act: Act,
    db: TestDb,
    /// Notified when the engine reaches `at`.
    pub entered: Arc<Notify>,
}

impl Scripted {
    /// An engine that does `act` when it reaches `at`.
    pub fn new(db: &TestDb, at: Stage, act: Act) -> Arc<Self> {
        Arc::new(Self { inner: BuiltinEngine::default(), at, act, db: db.clone(), entered: Arc::new(Notify::new()) })
    }

    async fn reach(&self, stage: Stage) -> Result<(), EngineError> {
        if stage != self.at {
            return Ok(());
        }
        self.entered.notify_one();
        let now = now_millis();
        match &self.act {
            Act::Block => std::future::pending().await,
            Act::RevokeKey(id) => {
                let row = api_key::ActiveModel {
                    id: Set(*id),
                    revoked_at: Set(Some(now)),
                    updated_at: Set(now),
                    ..Default::default()
                };
                api_key::Entity::update(row).exec(&self.db.db).await?;
            }
            Act::RemoveMember(id) => {
                let current = member::Entity::find_by_id(*id)
                    .one(&self.db.db)
                    .await?
                    .ok_or_else(|| EngineError::Transient("member vanished".into()))?;
                let row = member::ActiveModel {
                    id: Set(*id),
                    removed_at: Set(Some(now)),
                    revision: Set(current.revision + 1),
                    updated_at: Set(now),
                    ..Default::default()
                };
                member::Entity::update(row).exec(&self.db.db).await?;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ResearchEngine for Scripted {
    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError> {
        self.reach(Stage::Planning).await?;
        self.inner.plan(ctx).await
    }

    async fn retrieve(&self, ctx: &StageContext<'_>, plan: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError> {
        self.reach(Stage::Retrieving).await?;
        self.inner.retrieve(ctx, plan).await
    }

    async fn analyze(&self, ctx: &StageContext<'_>, found: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError> {
        self.reach(Stage::Analyzing).await?;
        self.inner.analyze(ctx, found).await
    }

    async fn generate(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Result<Staged<Answer>, EngineError> {
        self.reach(Stage::Generating).await?;
        self.inner.generate(ctx, evidence).await
    }
}
