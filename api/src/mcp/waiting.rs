//! The `research` tool's wait: the task is created as `start_research` creates it, then
//! followed through its journal until it ends (or pauses for a person), each new progress
//! event sent to the client as `notifications/progress` when the call carried a progress
//! token. The research task is the database's: a client that goes away stops the wait,
//! never the task.
use entity::research_task_progress_event as progress;
use rmcp::model::ProgressNotificationParam;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use crate::error::ApiError;
use crate::state::AppState;
use worker::app::Principal;

/// Where a tool call reports progress: the client's token and the connection back.
pub struct Progress {
    /// `_meta.progressToken` of the call.
    pub token: rmcp::model::ProgressToken,
    /// The client.
    pub peer: rmcp::Peer<rmcp::RoleServer>,
}

/// The most `research` calls one caller may have waiting at once (in this process): an
/// agent that opens a thousand is told to use `start_research` and `get_research`.
pub const MAX_WAITS_PER_CALLER: usize = 8;

/// The callers' waiting `research` calls, by caller.
static WAITING: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, usize>>> =
    std::sync::LazyLock::new(Default::default);

/// A waiting call's place, given back when it ends (however it ends).
pub struct Slot(String);

impl Slot {
    /// A place for one more waiting call of `caller`, unless it already has the most.
    pub fn take(caller: &Principal) -> Result<Self, ApiError> {
        let key = format!("{}\u{0}{}", caller.tenant_id, caller.subject_id);
        let mut waiting = WAITING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = waiting.entry(key.clone()).or_default();
        if *count >= MAX_WAITS_PER_CALLER {
            // Held like a burst of requests; the tool's description says why.
            return Err(ApiError::RateLimited { retry_after_secs: 5 });
        }
        *count += 1;
        Ok(Self(key))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut waiting = WAITING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = waiting.get_mut(&self.0) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                waiting.remove(&self.0);
            }
        }
    }
}

/// How often the wait reads the journal when no signal arrives (another process's worker
/// may be running the task).
const POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// Waits until task `id` ends or pauses, or `limit` passes, reporting each progress event.
pub async fn follow(
    state: &AppState,
    caller: &Principal,
    id: Uuid,
    progress: Option<&Progress>,
    limit: std::time::Duration,
) -> Result<(), ApiError> {
    let mut signals = state.notifier.subscribe();
    let until = tokio::time::Instant::now() + limit;
    let mut seen = 0;
    let mut reported = 0_u32;
    loop {
        let (task, events) = worker::app::tasks::progress_after(&state.app, caller, id, seen, 100).await?;
        for event in events {
            seen = event.sequence;
            if let Some(progress) = progress {
                reported += 1;
                let message = describe(&id, &event);
                let note =
                    ProgressNotificationParam::new(progress.token.clone(), f64::from(reported)).with_message(message);
                // A client that went away cannot be told; the task goes on regardless.
                let _ = progress.peer.notify_progress(note).await;
            }
        }
        if task.stage.is_terminal() || task.stage == entity::Stage::Paused {
            return Ok(());
        }
        let wait = tokio::time::sleep_until(until.min(tokio::time::Instant::now() + POLL));
        tokio::select! {
            () = wait => {}
            signal = signals.recv() => match signal {
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => tokio::time::sleep(POLL).await,
            },
        }
        if tokio::time::Instant::now() >= until {
            return Ok(());
        }
    }
}

/// A progress event as one line: the task, the stage and, for a round's end, the round.
fn describe(id: &Uuid, event: &progress::Model) -> String {
    let kind = match event.event_type {
        entity::ProgressEventType::Started => "started",
        entity::ProgressEventType::StageChanged => "stage_changed",
        entity::ProgressEventType::Paused => "paused",
        entity::ProgressEventType::Resumed => "resumed",
        entity::ProgressEventType::Canceled => "canceled",
        entity::ProgressEventType::Failed => "failed",
    };
    let mut line = format!("task {id}: {} ({kind})", event.stage.as_str());
    if let Some(round) = event.payload.get("round").and_then(Value::as_i64) {
        line.push_str(&format!(", round {round}"));
    }
    if let Some(reason) = event.payload.get("reason").and_then(Value::as_str) {
        line.push_str(&format!(", waiting for {}", reason.replace('_', " ")));
    }
    line
}
