//! Following a research thread: every turn's progress events, turn after turn (oldest
//! first), each turn followed exactly as `researchTaskProgress` follows a task (replay,
//! then live, gapless), then the next turn, waiting for one while the thread has none
//! more. A turn the caller may no longer read is passed over; one deleted while followed
//! is left. The stream stays open while the thread exists: its deletion completes it,
//! losing the space ends it with FORBIDDEN, the credential's expiry with UNAUTHENTICATED.
//! An idle follower reads the next turn every 500 ms and the thread's standing every 2 s.
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use entity::research_task_progress_event as progress;
use futures_util::{Stream, StreamExt as _};
use uuid::Uuid;
use worker::app::lists::PageKey;
use worker::app::threads::{self, Standing};
use worker::app::{App, Principal};

use super::follow::{expiry, follow};
use super::hub::LiveHub;
use crate::error::ApiError;

/// How often a thread with no turn left to follow is looked at again for a new turn.
const NEXT_TURN_POLL: Duration = Duration::from_millis(500);
/// How often its standing (deleted, its space no longer readable) is read again meanwhile.
const STANDING_POLL: Duration = Duration::from_secs(2);

/// Where a thread's stream stands: the turn (its creation time and id) and the last
/// sequence of it delivered. The cursor a client resumes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadPosition {
    /// The turn's `created_at`.
    pub turn_at: i64,
    /// The turn's task.
    pub task_id: Uuid,
    /// Its last event delivered.
    pub sequence: i32,
}

type TurnFeed = Pin<Box<dyn Stream<Item = Result<progress::Model, ApiError>> + Send>>;

struct ThreadFollow {
    app: Arc<App>,
    hub: LiveHub,
    caller: Principal,
    thread_id: Uuid,
    /// The turn under way, and where it stands.
    turn: Option<(ThreadPosition, TurnFeed)>,
    /// The cursor's turn, to follow first (after the cursor's sequence).
    resume: Option<ThreadPosition>,
    /// The last turn started: the next one comes after it.
    after: Option<PageKey>,
    /// When the thread's standing was last read.
    checked: Option<std::time::Instant>,
    done: bool,
}

/// Follows the thread after `after` (from its first turn for none). The caller checked
/// that the thread is theirs and readable.
pub fn follow_thread(
    app: Arc<App>,
    hub: &LiveHub,
    caller: Principal,
    thread_id: Uuid,
    after: Option<ThreadPosition>,
) -> impl Stream<Item = Result<(ThreadPosition, progress::Model), ApiError>> + use<> {
    let state = ThreadFollow {
        app,
        hub: hub.clone(),
        caller,
        thread_id,
        turn: None,
        resume: after,
        after: after.map(|at| PageKey { at: at.turn_at, id: at.task_id }),
        checked: None,
        done: false,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        let item = Box::pin(state.next()).await?;
        Some((item, state))
    })
}

impl ThreadFollow {
    async fn next(&mut self) -> Option<Result<(ThreadPosition, progress::Model), ApiError>> {
        loop {
            if self.done {
                return None;
            }
            if let Some((position, feed)) = &mut self.turn {
                match feed.next().await {
                    Some(Ok(row)) => {
                        position.sequence = row.sequence;
                        return Some(Ok((*position, row)));
                    }
                    // The turn went while followed: the thread goes on without it.
                    Some(Err(ApiError::NotFound)) | None => self.turn = None,
                    Some(Err(error)) => return Some(Err(self.end(error))),
                }
                continue;
            }
            match self.start_next_turn().await {
                Ok(true) => {}
                Ok(false) => {
                    tokio::select! {
                        () = expiry(&self.caller) => return Some(Err(self.end(ApiError::Unauthenticated))),
                        () = tokio::time::sleep(NEXT_TURN_POLL) => {}
                    }
                }
                Err(None) => {
                    self.done = true;
                    return None;
                }
                Err(Some(error)) => return Some(Err(self.end(error))),
            }
        }
    }

    fn end(&mut self, error: ApiError) -> ApiError {
        self.done = true;
        error
    }

    /// Starts following the next turn: `Ok(false)` when there is none yet, `Err(None)`
    /// when the thread is gone, `Err(Some(_))` when it may no longer be read.
    async fn start_next_turn(&mut self) -> Result<bool, Option<ApiError>> {
        if self.checked.is_none_or(|at| at.elapsed() >= STANDING_POLL) {
            match threads::standing(&self.app, &self.caller, self.thread_id).await.map_err(Some)? {
                Standing::Gone => return Err(None),
                Standing::Unreadable => return Err(Some(ApiError::Forbidden)),
                Standing::Readable(_) => self.checked = Some(std::time::Instant::now()),
            }
        }
        // The cursor's own turn first: the rest of it after the cursor's sequence.
        if let Some(cursor) = self.resume.take() {
            let visible =
                worker::app::access::visible_task(&self.app.db, &self.caller, cursor.task_id).await.map_err(Some)?;
            if visible.is_some() {
                self.follow_turn(cursor);
                return Ok(true);
            }
        }
        let next = threads::next_turn(&self.app, self.thread_id, self.after).await.map_err(Some)?;
        let Some(task) = next else { return Ok(false) };
        self.follow_turn(ThreadPosition { turn_at: task.created_at, task_id: task.id, sequence: 0 });
        Ok(true)
    }

    fn follow_turn(&mut self, position: ThreadPosition) {
        self.after = Some(PageKey { at: position.turn_at, id: position.task_id });
        let rows = follow::<progress::Model>(
            &self.hub,
            &self.app.db,
            self.caller.clone(),
            position.task_id,
            position.sequence.max(0),
        );
        self.turn = Some((position, Box::pin(rows)));
    }
}
