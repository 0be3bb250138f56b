//! Valid rows to start from, so a constraint test states only the one thing it breaks.
//! Tasks are created through `worker::lifecycle::create`, the way the API creates them;
//! the rows a test then mangles are built here as ActiveModels with every field valid.
use anyhow::Context as _;
use entity::{
    AccessChannel, MediaType, MemberRole, OutboxStatus, ProgressEventType, Stage, answer_trace, api_key,
    knowledge_document, knowledge_space, member, now_millis, permission_snapshot, research_task_job as job,
    research_task_outbox as outbox, research_task_partial_result as partial, research_task_progress_event as progress,
};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::json;
use uuid::Uuid;
use worker::grant::{GrantRequest, GrantSource};
use worker::knowledge::index::Indexing;
use worker::lifecycle::{NewTask, create};

use crate::TestDb;

/// A space with one owner and one queued task the owner created.
#[derive(Debug, Clone)]
pub struct Task {
    /// The space.
    pub space: knowledge_space::Model,
    /// The owner who created the task.
    pub member: member::Model,
    /// The task, as `create` returned it.
    pub job: job::Model,
}

/// Inserts a knowledge space in a tenant of its own, so tests never share scope.
pub async fn space(db: &TestDb) -> anyhow::Result<knowledge_space::Model> {
    let now = now_millis();
    let row = knowledge_space::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(format!("tenant-{}", Uuid::new_v4().simple())),
        name: Set("Fixture space".to_owned()),
        created_at: Set(now),
        updated_at: Set(now),
    };
    Ok(knowledge_space::Entity::insert(row).exec_with_returning(&db.db).await?)
}

/// Adds `subject_id` to the space with `role`, at revision 1.
pub async fn member(
    db: &TestDb,
    space: &knowledge_space::Model,
    subject_id: &str,
    role: MemberRole,
) -> anyhow::Result<member::Model> {
    let now = now_millis();
    let row = member::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(space.tenant_id.clone()),
        knowledge_space_id: Set(space.id),
        subject_id: Set(subject_id.to_owned()),
        role: Set(role),
        revision: Set(1),
        removed_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    };
    Ok(member::Entity::insert(row).exec_with_returning(&db.db).await?)
}

/// Adds an API key (revision 1, no expiry) to the space.
pub async fn api_key(db: &TestDb, space: &knowledge_space::Model) -> anyhow::Result<api_key::Model> {
    let now = now_millis();
    let row = api_key::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(space.tenant_id.clone()),
        knowledge_space_id: Set(space.id),
        name: Set("fixture key".to_owned()),
        secret_hash: Set("0".repeat(64)),
        revision: Set(1),
        expires_at: Set(None),
        revoked_at: Set(None),
        created_by: Set("owner".to_owned()),
        created_at: Set(now),
        updated_at: Set(now),
    };
    Ok(api_key::Entity::insert(row).exec_with_returning(&db.db).await?)
}

/// Adds a plain-text document to the member's space, written by the member, split into
/// passages with the default settings as the API does it.
pub async fn document(
    db: &TestDb,
    author: &member::Model,
    title: &str,
    content: &str,
) -> anyhow::Result<knowledge_document::Model> {
    document_as(db, author, title, content, MediaType::TextPlain).await
}

/// [`document`] in another format.
pub async fn document_as(
    db: &TestDb,
    author: &member::Model,
    title: &str,
    content: &str,
    media_type: MediaType,
) -> anyhow::Result<knowledge_document::Model> {
    let new = worker::store::documents::NewDocument {
        tenant_id: author.tenant_id.clone(),
        knowledge_space_id: author.knowledge_space_id,
        title: title.to_owned(),
        content: content.to_owned(),
        media_type,
        source_uri: None,
        metadata: json!({}),
        created_by: author.subject_id.clone(),
        indexing_status: entity::IndexingStatus::Ready,
    };
    add_document(db, new, Indexing { chunk: Default::default(), embeddings_on: false }).await
}

/// Adds `new` as the `addKnowledgeDocument` mutation does: split, then written with its
/// passages in one transaction.
pub async fn add_document(
    db: &TestDb,
    new: worker::store::documents::NewDocument,
    indexing: Indexing,
) -> anyhow::Result<knowledge_document::Model> {
    let chunks = worker::knowledge::index::Splitter::new(indexing.chunk).split(&new.content, new.media_type).await?;
    let txn = worker::store::begin_write(&db.db).await?;
    let new = worker::store::documents::NewDocument {
        indexing_status: worker::knowledge::index::initial_status(indexing.embeddings_on),
        ..new
    };
    let document = worker::store::documents::add(&txn, new, &chunks, now_millis()).await?;
    txn.commit().await?;
    Ok(document)
}

/// The grant request of a member, through `channel`.
pub fn member_grant(member: &member::Model, channel: AccessChannel) -> GrantRequest {
    GrantRequest {
        tenant_id: member.tenant_id.clone(),
        knowledge_space_id: member.knowledge_space_id,
        subject_id: member.subject_id.clone(),
        access_channel: channel,
        source: GrantSource::Member { revision: member.revision, role: member.role },
    }
}

/// Issues a permission snapshot for a member, as a task's creation does.
pub async fn snapshot(
    db: &TestDb,
    member: &member::Model,
    channel: AccessChannel,
) -> anyhow::Result<permission_snapshot::Model> {
    let row = worker::grant::snapshot_of(uuid::Uuid::now_v7(), &member_grant(member, channel), entity::now_millis());
    Ok(worker::store::grants::insert_snapshot(&db.db, row).await?)
}

/// A valid request for a task asking `query` under `grant`: default mode, top 5, a
/// budget of one dollar, no limits, metadata or idempotency key, three attempts. A test
/// changes the fields it is about with struct update syntax.
pub fn new_task(grant: GrantRequest, query: &str) -> NewTask {
    NewTask {
        grant,
        query: query.to_owned(),
        mode: None,
        top_k: Some(5),
        budget_usd: Some(1.0),
        limits: entity::TaskLimits::default(),
        metadata: json!({}),
        idempotency_key: None,
        max_execution_attempts: 3,
        quotas: worker::lifecycle::Quotas::default(),
        thread: None,
    }
}

/// Creates a queued task for the member, reaching the service through `channel`, through
/// the lifecycle as the API would (job, snapshot and first outbox delivery).
pub async fn job(db: &TestDb, member: &member::Model, channel: AccessChannel) -> anyhow::Result<job::Model> {
    let input = new_task(member_grant(member, channel), "How do leases fence out stale workers?");
    let created = create(&db.db, &worker::Notifier::new(), input, entity::now_millis())
        .await
        .context("creating a fixture task")?;
    Ok(created.task)
}

/// A new space, its owner and one queued task.
pub async fn task(db: &TestDb) -> anyhow::Result<Task> {
    let space = space(db).await?;
    let member = member(db, &space, "owner", MemberRole::Owner).await?;
    let job = job(db, &member, AccessChannel::Interactive).await?;
    Ok(Task { space, member, job })
}

/// The job's outbox deliveries, in revision order.
pub async fn deliveries(db: &TestDb, job: &job::Model) -> anyhow::Result<Vec<outbox::Model>> {
    Ok(outbox::Entity::find()
        .filter(outbox::Column::ResearchTaskJobId.eq(job.id))
        .order_by_asc(outbox::Column::DeliveryRevision)
        .all(&db.db)
        .await?)
}

/// A valid snapshot for the member with no API key binding (not inserted).
pub fn snapshot_row(member: &member::Model, channel: AccessChannel) -> permission_snapshot::ActiveModel {
    permission_snapshot::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(member.tenant_id.clone()),
        knowledge_space_id: Set(member.knowledge_space_id),
        subject_id: Set(member.subject_id.clone()),
        access_channel: Set(channel),
        revision: Set(member.revision),
        permissions: Set(json!(member.role.permissions())),
        issued_at: Set(now_millis()),
        api_key_id: Set(None),
        api_key_revision: Set(None),
        api_key_expires_at: Set(None),
    }
}

/// A valid outbox row for the job (not inserted): pending, unlocked.
pub fn outbox_row(job: &job::Model, delivery_revision: i32, idempotency_key: &str) -> outbox::ActiveModel {
    let now = now_millis();
    outbox::ActiveModel {
        id: Set(Uuid::now_v7()),
        research_task_job_id: Set(job.id),
        delivery_revision: Set(delivery_revision),
        event_type: Set(outbox::EVENT_TYPE.to_owned()),
        schema_version: Set(outbox::SCHEMA_VERSION),
        idempotency_key: Set(idempotency_key.to_owned()),
        payload: Set(json!({ "task_id": job.id })),
        status: Set(OutboxStatus::Pending),
        available_at: Set(now),
        dispatch_attempts: Set(0),
        locked_by: Set(None),
        locked_until: Set(None),
        lock_token: Set(None),
        queue_job_id: Set(None),
        last_error: Set(None),
        delivered_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
}

/// A valid progress event for the job (not inserted).
pub fn progress_row(job: &job::Model, sequence: i32, idempotency_key: &str) -> progress::ActiveModel {
    progress::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(job.tenant_id.clone()),
        knowledge_space_id: Set(job.knowledge_space_id),
        research_task_job_id: Set(job.id),
        sequence: Set(sequence),
        idempotency_key: Set(idempotency_key.to_owned()),
        event_type: Set(ProgressEventType::Started),
        stage: Set(Stage::Planning),
        payload: Set(json!({})),
        created_at: Set(now_millis()),
    }
}

/// A valid partial result for the job (not inserted).
pub fn partial_row(job: &job::Model, sequence: i32, idempotency_key: &str) -> partial::ActiveModel {
    partial::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(job.tenant_id.clone()),
        knowledge_space_id: Set(job.knowledge_space_id),
        research_task_job_id: Set(job.id),
        sequence: Set(sequence),
        idempotency_key: Set(idempotency_key.to_owned()),
        evidence_bundle: Set(json!({ "evidence": [] })),
        created_at: Set(now_millis()),
    }
}

/// A valid answer trace bound to `snapshot` (not inserted).
pub fn answer_trace_row(snapshot: &permission_snapshot::Model) -> answer_trace::ActiveModel {
    answer_trace::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(snapshot.tenant_id.clone()),
        knowledge_space_id: Set(snapshot.knowledge_space_id),
        research_task_id: Set(None),
        query: Set("What is a lease?".to_owned()),
        answer: Set("A time-bounded claim [1].".to_owned()),
        evidence: Set(json!([])),
        created_at: Set(now_millis()),
        subject_id: Set(Some(snapshot.subject_id.clone())),
        permission_snapshot_id: Set(Some(snapshot.id)),
        permission_snapshot_revision: Set(Some(snapshot.revision)),
        access_channel: Set(Some(snapshot.access_channel)),
    }
}

/// Appends a partial result to the task's journal under its row lock, as a stage boundary
/// would (a key written before is kept); returns its sequence.
pub async fn append_partial(
    db: &TestDb,
    task: &entity::research_task_job::Model,
    key: &str,
    bundle: serde_json::Value,
) -> anyhow::Result<i32> {
    let txn = worker::store::begin_write(&db.db).await?;
    worker::store::tasks::lock(&txn, task.id).await?;
    let row = entity::research_task_partial_result::Model {
        id: uuid::Uuid::now_v7(),
        tenant_id: task.tenant_id.clone(),
        knowledge_space_id: task.knowledge_space_id,
        research_task_job_id: task.id,
        sequence: 0,
        idempotency_key: key.to_owned(),
        evidence_bundle: bundle,
        created_at: entity::now_millis(),
    };
    let appended = worker::store::journal::append_partial(&txn, &row).await?;
    txn.commit().await?;
    Ok(appended.sequence)
}

/// Appends a progress event (payload `{}`) to the task's journal under its row lock (a key
/// written before is kept); returns its sequence.
pub async fn append_event(
    db: &TestDb,
    task: &entity::research_task_job::Model,
    event_type: entity::ProgressEventType,
    stage: entity::Stage,
    key: &str,
) -> anyhow::Result<i32> {
    let txn = worker::store::begin_write(&db.db).await?;
    worker::store::tasks::lock(&txn, task.id).await?;
    let row = entity::research_task_progress_event::Model {
        id: uuid::Uuid::now_v7(),
        tenant_id: task.tenant_id.clone(),
        knowledge_space_id: task.knowledge_space_id,
        research_task_job_id: task.id,
        sequence: 0,
        idempotency_key: key.to_owned(),
        event_type,
        stage,
        payload: serde_json::json!({}),
        created_at: entity::now_millis(),
    };
    let appended = worker::store::journal::append_event(&txn, &row).await?;
    txn.commit().await?;
    Ok(appended.sequence)
}
