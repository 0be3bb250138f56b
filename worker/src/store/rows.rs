//! Plain rows and parameters the store's operations and its two backends share
//! ([`super::backend::Backend`] names them). Names nothing else of the store, so a
//! backend's implementation may use the operations without a circle.
use entity::{Stage, research_task_job as job};
use sea_orm::FromQueryResult;
use uuid::Uuid;

/// A held lease as the store checks it: the job and the token its row must still carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeasePair {
    /// The job leased.
    pub job_id: Uuid,
    /// The fencing token.
    pub token: Uuid,
}

/// The rows a new task is created with, every column decided by the caller.
#[derive(Debug, Clone)]
pub struct NewTaskRows {
    /// The grant it runs under.
    pub snapshot: entity::permission_snapshot::Model,
    /// The task.
    pub task: job::Model,
    /// The trace context of the request that created it, when spans are exported.
    pub trace_context: Option<entity::research_task_trace_context::Model>,
    /// Its first outbox entry.
    pub outbox: entity::research_task_outbox::Model,
}

/// Why a lease holder's boundary would not land now, read under the row's lock: the lease
/// is gone, the stage moved under it, or the task's grant no longer holds. `None` when it
/// would land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// The row no longer carries the lease's token (re-claimed, canceled, paused, deleted).
    LeaseLost,
    /// The row moved to this stage under the lease.
    StageMoved(Stage),
    /// The grant died, for this reason.
    GrantDenied(entity::GrantDenial),
}

/// Which per-tenant lock, and how it is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantLock {
    /// Creating something for the tenant: shared with every other creator, exclusive of
    /// a seal.
    Creating,
    /// Sealing the tenant for erasure: waits for every creator under way.
    Sealing,
    /// Counting the tenant's quota or cap: one counter at a time.
    Counting,
}

/// Where to search.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The space's tenant.
    pub tenant_id: &'a str,
    /// The space.
    pub knowledge_space_id: Uuid,
    /// Only passages of these documents (a task's `limits.filters`, resolved by
    /// `documents::matching`); `None` for every document of the space.
    pub documents: Option<&'a [Uuid]>,
}

impl<'a> Scope<'a> {
    /// Every document of the space.
    pub fn space(tenant_id: &'a str, knowledge_space_id: Uuid) -> Self {
        Self { tenant_id, knowledge_space_id, documents: None }
    }
}

/// A passage as search reads it, with a ranker's score.
#[derive(Debug, Clone, FromQueryResult)]
pub struct PassageRow {
    /// The passage.
    pub id: Uuid,
    /// Its document.
    pub document_id: Uuid,
    /// The document's title.
    pub title: String,
    /// Its text.
    pub text: String,
    /// Where it starts in the document's content, in code points.
    pub char_start: i32,
    /// Where it ends (exclusive).
    pub char_end: i32,
    /// The headings above it, a JSON array.
    pub heading_path: serde_json::Value,
    /// The first page of a PDF it comes from.
    pub page_start: Option<i32>,
    /// The last page of a PDF it comes from.
    pub page_end: Option<i32>,
    /// Where its document came from, if its author said.
    pub source_uri: Option<String>,
    /// The ranker's score (0 where none ranked it).
    pub score: f64,
}
