//! What a followed task's subscribers hear.
use std::sync::Arc;

use entity::{
    research_task_answer_draft as draft, research_task_partial_result as partial,
    research_task_progress_event as progress,
};

/// What subscribers of a task hear.
#[derive(Debug, Clone)]
pub enum TopicEvent {
    /// A new progress event (in sequence order).
    Progress(Arc<progress::Model>),
    /// A new partial result (in sequence order).
    Partial(Arc<partial::Model>),
    /// The answer draft changed (read only while someone follows the answer).
    Answer(Arc<draft::Model>),
    /// The task's grant no longer holds: every subscription ends with an error.
    GrantRevoked,
    /// The task is terminal and everything it wrote has been broadcast.
    Ended,
}
