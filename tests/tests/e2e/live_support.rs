//! What the live-progress tests share: a server with settings a test chooses, the two
//! subscription documents, a quick way to commit progress events through the task
//! lifecycle (exactly what the pause/resume/cancel mutations call), and the check that a
//! feed delivered each sequence exactly once and in order.
use anyhow::{Context as _, bail, ensure};
use api::config::Settings;
use api::state::AppState;
use kfs_tests::TestDb;
use kfs_tests::server::TestServer;
use kfs_tests::ws::{Event, WsClient, sequence_of};
use serde_json::Value;
use uuid::Uuid;
use worker::lifecycle::{self, TaskRef};

use crate::api_support::Api;

/// `researchTaskProgress` after `$after`.
pub const PROGRESS: &str = "subscription($task: UUID!, $after: Int) { \
    researchTaskProgress(taskId: $task, afterSequence: $after) { sequence eventType stage } }";

/// `researchTaskPartialResults` after `$after`.
pub const PARTIALS: &str = "subscription($task: UUID!, $after: Int) { \
    researchTaskPartialResults(taskId: $task, afterSequence: $after) { sequence evidenceBundle } }";

/// An [`Api`] whose server runs with `tweak`ed settings (embedded worker off unless the
/// tweak turns it on).
pub async fn api_with(db: &TestDb, tweak: impl FnOnce(&mut Settings)) -> anyhow::Result<Api> {
    let server = TestServer::start_with(&db.url, tweak).await?;
    Ok(Api { server, tenant: format!("tenant-{}", Uuid::new_v4().simple()) })
}

/// Commits progress events to one queued task by alternating pause and resume through
/// `worker::lifecycle`, on the server's own pool and notifier: the same transactions the
/// mutations run, without an HTTP round trip each, so a test can write hundreds quickly.
pub struct Journal {
    state: AppState,
    task: TaskRef,
    paused: bool,
    written: i64,
}

impl Journal {
    /// The journal of `task_id`, created by `subject` in the api's tenant and not yet
    /// paused; `written` events are in it already.
    pub fn of(api: &Api, subject: &str, task_id: &str, written: i64) -> anyhow::Result<Self> {
        let task = TaskRef {
            id: task_id.parse().with_context(|| format!("task id {task_id}"))?,
            tenant_id: api.tenant.clone(),
            subject_id: subject.to_owned(),
            expected_row_version: None,
        };
        Ok(Self { state: api.server.server.state.clone(), task, paused: false, written })
    }

    /// How many events the task's journal holds (its last sequence).
    pub fn written(&self) -> i64 {
        self.written
    }

    /// Commits one event: a pause if the task runs, a resume if it is paused.
    pub async fn toggle(&mut self) -> anyhow::Result<()> {
        let (db, notifier) = (&self.state.db, &self.state.notifier);
        if self.paused {
            lifecycle::resume(db, notifier, &self.task, entity::now_millis()).await.context("resuming")?;
        } else {
            lifecycle::pause(db, notifier, &self.task, None, entity::now_millis()).await.context("pausing")?;
        }
        self.paused = !self.paused;
        self.written += 1;
        Ok(())
    }

    /// Commits `count` events, one transaction each.
    pub async fn toggles(&mut self, count: usize) -> anyhow::Result<()> {
        for _ in 0..count {
            self.toggle().await?;
        }
        Ok(())
    }

    /// Cancels the task: its terminal event.
    pub async fn cancel(&mut self) -> anyhow::Result<()> {
        lifecycle::cancel(&self.state.db, &self.state.notifier, &self.task, entity::now_millis())
            .await
            .context("canceling")?;
        self.written += 1;
        Ok(())
    }
}

/// The sequences of `field` in `payloads`, in arrival order.
pub fn sequences(payloads: &[Value], field: &str) -> anyhow::Result<Vec<i64>> {
    payloads.iter().map(|payload| sequence_of(payload, field)).collect()
}

/// Fails unless `got` is exactly `from..=to`: every sequence once, in order.
pub fn assert_exactly(what: &str, got: &[i64], from: i64, to: i64) -> anyhow::Result<()> {
    let expected: Vec<i64> = (from..=to).collect();
    if got == expected {
        return Ok(());
    }
    // Name the duplicates and the gaps: in a list of hundreds they are hard to spot.
    let duplicated: Vec<i64> =
        got.iter().enumerate().filter(|(index, seq)| got[..*index].contains(seq)).map(|(_, seq)| *seq).collect();
    let missing: Vec<i64> = expected.iter().copied().filter(|seq| !got.contains(seq)).collect();
    bail!(
        "{what}: expected {from}..={to} once each, in order; got {} (duplicated {duplicated:?}, missing {missing:?}): {got:?}",
        got.len()
    )
}

/// The next `count` `next` payloads of operation `id`; anything else (another operation,
/// an error, a complete, the close) fails.
pub async fn take(client: &mut WsClient, id: &str, count: usize) -> anyhow::Result<Vec<Value>> {
    let mut payloads = Vec::with_capacity(count);
    while payloads.len() < count {
        match client.next_event().await? {
            Event::Next(from, payload) if from == id => payloads.push(payload),
            other => bail!("waiting for {count} results of {id} (have {}): {other:?}", payloads.len()),
        }
    }
    Ok(payloads)
}

/// The code operation `id` was refused with: an `error` message (refused before any field
/// ran), or a `next` carrying only errors followed by `complete` (a resolver refused it).
pub async fn refused_on_socket(client: &mut WsClient, id: &str) -> anyhow::Result<String> {
    match client.next_event().await? {
        Event::Error(from, errors) if from == id => errors
            .pointer("/0/extensions/code")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .with_context(|| format!("no code in {errors}")),
        Event::Next(from, payload) if from == id => {
            let code = kfs_tests::ws::error_code(&payload)
                .map(str::to_owned)
                .with_context(|| format!("a refused operation delivered {payload}"))?;
            ensure!(client.next_event().await? == Event::Complete(id.to_owned()), "no complete after the refusal");
            Ok(code)
        }
        other => bail!("expected a refusal of {id}, got {other:?}"),
    }
}
