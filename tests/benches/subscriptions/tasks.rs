//! The tasks the subscribers follow, and the commits that give them new progress events.
//! Tasks are created through the public API with no worker running, so they stay
//! non-terminal; each is paused once so every subscription has one event to replay,
//! which proves it is established.
use std::time::Instant;

use anyhow::Context as _;
use kfs_tests::server::{GraphqlClient, TestServer};
use sea_orm::DatabaseConnection;
use serde_json::{Value, json};
use uuid::Uuid;
use worker::lifecycle::TaskRef;

/// The subject that owns every task and opens every subscription.
const OWNER: &str = "bench-owner";

/// A tenant of this run's own, a client acting as its owner and the tasks.
pub struct Fixture {
    /// The tenant.
    pub tenant: String,
    /// The owner's client of the server, with a token valid for an hour.
    pub client: GraphqlClient,
    /// The tasks, each paused once (its last sequence is 1).
    pub tasks: Vec<Uuid>,
}

/// How a new progress event gets committed.
pub enum Committer {
    /// A `pauseResearchTask` / `resumeResearchTask` mutation to the server: the commit
    /// happens in the server process, which hears it through its in-process notifier.
    Mutation(GraphqlClient),
    /// `worker::lifecycle::pause` / `resume` from this process on the same database, as a
    /// worker process commits: the server hears it through PostgreSQL NOTIFY.
    Lifecycle { db: DatabaseConnection, tenant: String },
}

/// Creates a space and `count` tasks in a new tenant of the server at `graphql_url`, and
/// pauses each task once.
pub async fn create(graphql_url: String, count: usize) -> anyhow::Result<Fixture> {
    let tenant = format!("bench-{}", Uuid::new_v4().simple());
    let client = GraphqlClient::new(graphql_url, TestServer::token(OWNER, &tenant));
    let space = client.run("mutation { createKnowledgeSpace(input: {name: \"bench\"}) { id } }", json!({})).await?;
    let space = space.pointer("/createKnowledgeSpace/id").and_then(Value::as_str).context("no space id")?.to_owned();
    let mut tasks = Vec::with_capacity(count);
    for _ in 0..count {
        let input = json!({ "input": { "knowledgeSpaceId": space, "query": "How do subscriptions scale?" } });
        let created = client
            .run("mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }", input)
            .await?;
        let id = created.pointer("/createResearchTask/id").and_then(Value::as_str).context("no task id")?;
        let id: Uuid = id.parse()?;
        client.run(PAUSE, json!({ "id": id })).await?;
        tasks.push(id);
    }
    Ok(Fixture { tenant, client, tasks })
}

const PAUSE: &str = "mutation($id: UUID!) { pauseResearchTask(id: $id) { rowVersion } }";
const RESUME: &str = "mutation($id: UUID!) { resumeResearchTask(id: $id) { rowVersion } }";

impl Committer {
    /// Commits the event that gets `sequence` on `task`: a resume after a pause (even
    /// sequences), a pause after a resume (odd ones). Returns the instant just before the
    /// commit was asked for, the start of the measured latency.
    pub async fn commit(&self, task: Uuid, sequence: i32) -> anyhow::Result<Instant> {
        let pause = sequence % 2 == 1;
        let started = Instant::now();
        match self {
            Self::Mutation(client) => {
                client.run(if pause { PAUSE } else { RESUME }, json!({ "id": task })).await?;
            }
            Self::Lifecycle { db, tenant } => {
                let task = TaskRef {
                    id: task,
                    tenant_id: tenant.clone(),
                    subject_id: OWNER.to_owned(),
                    expected_row_version: None,
                };
                let notifier = worker::Notifier::new();
                if pause {
                    worker::lifecycle::pause(db, &notifier, &task, None, entity::now_millis()).await?;
                } else {
                    worker::lifecycle::resume(db, &notifier, &task, entity::now_millis()).await?;
                }
            }
        }
        Ok(started)
    }

    /// How the commits reach the server, for the report.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Mutation(_) => "GraphQL pause/resume mutations (commit in the server process)",
            Self::Lifecycle { .. } => "worker::lifecycle pause/resume from the bench process (PostgreSQL NOTIFY)",
        }
    }
}
