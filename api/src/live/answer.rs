//! `researchTaskAnswer`: the answer as it is written. The worker rewrites the task's draft
//! row at a bounded rate (any process can read it; notifications only make it fast); the
//! task's topic reads it while someone follows the answer and broadcasts each change. A
//! subscription turns drafts into deltas: `offset` counts code points before `text`, a new
//! generation (a restarted stream) sends `reset: true` from offset 0, and once the task
//! completes the last delta (`done: true`) carries the rest of the committed answer, so the
//! deltas since the last reset concatenate exactly to it. A task that ends otherwise ends
//! the stream without `done`.
use std::sync::Arc;

use entity::{Stage, research_task_answer_draft as draft};
use futures_util::Stream;
use sea_orm::DatabaseConnection;
use tokio::sync::broadcast::{self, error::RecvError};
use uuid::Uuid;

use super::follow::{expiry, revocation};
use super::{AnswerFollower, LiveHub, Topic, TopicEvent};
use crate::error::ApiError;
use worker::app::Principal;
use worker::app::feeds;

/// How often an idle subscription checks that its topic still runs.
const TOPIC_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// One message of the answer stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerDelta {
    /// Code points of the answer before `text`.
    pub offset: i32,
    /// The next part of the answer.
    pub text: String,
    /// The answer is complete and committed: nothing follows.
    pub done: bool,
    /// Generation started over: discard what was received; `offset` is 0.
    pub reset: bool,
}

struct Feed {
    hub: LiveHub,
    db: DatabaseConnection,
    caller: Principal,
    task_id: Uuid,
    /// Where the client asked to start.
    after: i32,
    /// The generation delivered from, and how many of its code points were delivered.
    sent: Option<(i32, i32)>,
    topic: Arc<Topic>,
    events: broadcast::Receiver<TopicEvent>,
    _following: AnswerFollower,
    /// Whether the draft should be read from the database before following the topic.
    read_draft: bool,
    over: bool,
}

/// Follows the task's answer after `after` code points. The caller checked visibility.
pub fn follow_answer(
    hub: &LiveHub,
    db: &DatabaseConnection,
    caller: Principal,
    task_id: Uuid,
    after: i32,
) -> impl Stream<Item = Result<AnswerDelta, ApiError>> + use<> {
    let (topic, events) = hub.subscribe(task_id);
    let following = topic.follow_answer();
    let feed = Feed {
        hub: hub.clone(),
        db: db.clone(),
        caller,
        task_id,
        after,
        sent: None,
        topic,
        events,
        _following: following,
        read_draft: true,
        over: false,
    };
    futures_util::stream::unfold(feed, |mut feed| async move {
        let item = feed.next().await?;
        Some((item, feed))
    })
}

impl Feed {
    async fn next(&mut self) -> Option<Result<AnswerDelta, ApiError>> {
        loop {
            if self.over {
                return None;
            }
            if std::mem::take(&mut self.read_draft) {
                match Box::pin(self.catch_up()).await {
                    Ok(Some(delta)) => return Some(Ok(delta)),
                    Ok(None) => continue,
                    Err(error) => return self.end(Err(error)),
                }
            }
            let event = tokio::select! {
                () = expiry(&self.caller) => return self.end(Err(ApiError::Unauthenticated)),
                event = self.events.recv() => event,
                () = tokio::time::sleep(TOPIC_CHECK) => {
                    if self.topic.is_closed() {
                        // Its driver stopped: take a fresh topic and catch up from the database.
                        (self.topic, self.events) = self.hub.subscribe(self.task_id);
                        self._following = self.topic.follow_answer();
                        self.read_draft = true;
                    }
                    continue;
                }
            };
            match event {
                Ok(TopicEvent::Answer(row)) => {
                    if let Some(delta) = self.advance(&row) {
                        return Some(Ok(delta));
                    }
                }
                Ok(TopicEvent::GrantRevoked) => {
                    let error = revocation(&self.db, &self.caller).await;
                    return self.end(Err(error));
                }
                Ok(TopicEvent::Ended) | Err(RecvError::Closed) => {
                    let last = Box::pin(self.finish()).await.transpose();
                    self.over = true;
                    return last;
                }
                Ok(TopicEvent::Progress(_) | TopicEvent::Partial(_)) => {}
                // Fell behind: the draft in the database is newer than anything dropped.
                Err(RecvError::Lagged(_)) => self.read_draft = true,
            }
        }
    }

    fn end(&mut self, item: Result<AnswerDelta, ApiError>) -> Option<Result<AnswerDelta, ApiError>> {
        self.over = true;
        Some(item)
    }

    /// Reads the task and its draft: a finished task gives its last delta at once.
    async fn catch_up(&mut self) -> Result<Option<AnswerDelta>, ApiError> {
        let task = feeds::task(&self.db, self.task_id).await?.ok_or(ApiError::NotFound)?;
        if task.stage.is_terminal() {
            let last = self.finish().await;
            self.over = true;
            return last;
        }
        let row = feeds::draft(&self.db, self.task_id).await?;
        Ok(row.and_then(|row| self.advance(&row)))
    }

    /// The delta a draft adds to what was delivered, if any.
    fn advance(&mut self, row: &draft::Model) -> Option<AnswerDelta> {
        let delta = match self.sent {
            Some((generation, _)) if row.generation < generation => return None,
            Some((generation, sent)) if row.generation == generation => {
                if row.char_count <= sent {
                    return None;
                }
                AnswerDelta { offset: sent, text: skip_chars(&row.answer, sent), done: false, reset: false }
            }
            Some(_) => AnswerDelta { offset: 0, text: row.answer.clone(), done: false, reset: true },
            None if row.char_count >= self.after => {
                let text = skip_chars(&row.answer, self.after);
                self.sent = Some((row.generation, row.char_count));
                return (!text.is_empty()).then_some(AnswerDelta {
                    offset: self.after,
                    text,
                    done: false,
                    reset: false,
                });
            }
            // The client holds more than this generation has: what it holds is from an
            // earlier one.
            None => AnswerDelta { offset: 0, text: row.answer.clone(), done: false, reset: true },
        };
        self.sent = Some((row.generation, row.char_count));
        Some(delta)
    }

    /// The task ended: the rest of the committed answer with `done`, or nothing when the
    /// task ended without one.
    async fn finish(&mut self) -> Result<Option<AnswerDelta>, ApiError> {
        let task = feeds::task(&self.db, self.task_id).await?.ok_or(ApiError::NotFound)?;
        if task.stage != Stage::Completed {
            return Ok(None);
        }
        let Some(trace) = feeds::answer_trace(&self.db, &task).await? else {
            return Ok(None);
        };
        let row = feeds::draft(&self.db, self.task_id).await?;
        let length = i32::try_from(trace.answer.chars().count()).unwrap_or(i32::MAX);
        let delta = match (self.sent, row) {
            (Some((generation, sent)), Some(row)) if row.generation == generation && sent <= length => {
                AnswerDelta { offset: sent, text: skip_chars(&trace.answer, sent), done: true, reset: false }
            }
            (Some(_), _) => AnswerDelta { offset: 0, text: trace.answer, done: true, reset: true },
            (None, _) if self.after <= length => AnswerDelta {
                offset: self.after,
                text: skip_chars(&trace.answer, self.after),
                done: true,
                reset: false,
            },
            (None, _) => AnswerDelta { offset: 0, text: trace.answer, done: true, reset: true },
        };
        Ok(Some(delta))
    }
}

/// `text` after its first `count` code points.
fn skip_chars(text: &str, count: i32) -> String {
    let count = usize::try_from(count).unwrap_or_default();
    match text.char_indices().nth(count) {
        Some((at, _)) => text[at..].to_owned(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipping_counts_code_points_not_bytes() {
        assert_eq!(skip_chars("héllo wörld", 7), "örld");
        assert_eq!(skip_chars("abc", 3), "");
        assert_eq!(skip_chars("abc", 9), "");
        assert_eq!(skip_chars("abc", 0), "abc");
    }
}
