//! Live fan-out for subscriptions. The process's one database listener
//! (`worker::runtime::spawn_listener`) turns PostgreSQL NOTIFYs into in-process signals; one
//! [`Topic`] per followed task reads each new row once (through `worker::app::feeds`) and
//! broadcasts it to every subscriber of that task, so an event costs one query per task,
//! not one per subscriber. Subscribers replay from the database themselves and fall
//! back to it whenever they see a gap, so a lost signal delays a row but never loses it.

mod answer;
mod credentials;
mod document_status;
mod document_watch;
mod event;
mod follow;
mod hub;
mod journal_row;
mod thread;
mod topic;

pub use answer::{AnswerDelta, follow_answer};
pub use credentials::KeyWatchGuard;
pub use document_status::{follow_document, readable_document};
pub use event::TopicEvent;
pub use follow::follow;
pub use hub::LiveHub;
pub use journal_row::JournalRow;
pub use thread::{ThreadPosition, follow_thread};
pub use topic::{AnswerFollower, Topic};
