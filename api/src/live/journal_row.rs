//! A row of a task's journal as subscriptions deliver it.
use std::sync::Arc;

use entity::{Journal, research_task_partial_result as partial, research_task_progress_event as progress};
use sea_orm::DatabaseConnection;
use uuid::Uuid;
use worker::app::{AppError, feeds};

use super::event::TopicEvent;

/// A row of a task's journal that a subscription delivers: the journal's row, plus how
/// it travels through a topic and whether it ends the feed.
pub trait JournalRow: sea_orm::ModelTrait + sea_orm::FromQueryResult + Clone + Send + Sync + 'static {
    /// Its table.
    type Table: Journal<Model = Self>;
    /// This kind's row in a topic event, if the event carries one.
    fn from_event(event: &TopicEvent) -> Option<Arc<Self>>;
    /// Whether nothing can follow this row (a progress event into a terminal stage).
    fn ends_feed(&self) -> bool;
    /// Its sequence.
    fn sequence(&self) -> i32 {
        Self::Table::sequence(self)
    }
    /// Up to `limit` rows of the task after sequence `after`, in order.
    fn fetch(
        db: &DatabaseConnection,
        task_id: Uuid,
        after: i32,
        limit: u64,
    ) -> impl Future<Output = Result<Vec<Self>, AppError>> + Send {
        feeds::journal_after::<Self::Table>(db, task_id, after, limit)
    }
}

impl JournalRow for progress::Model {
    type Table = progress::Entity;
    fn from_event(event: &TopicEvent) -> Option<Arc<Self>> {
        match event {
            TopicEvent::Progress(row) => Some(row.clone()),
            _ => None,
        }
    }
    fn ends_feed(&self) -> bool {
        self.stage.is_terminal()
    }
}

impl JournalRow for partial::Model {
    type Table = partial::Entity;
    fn from_event(event: &TopicEvent) -> Option<Arc<Self>> {
        match event {
            TopicEvent::Partial(row) => Some(row.clone()),
            _ => None,
        }
    }
    fn ends_feed(&self) -> bool {
        false
    }
}
