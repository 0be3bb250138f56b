//! How a caller names a task it commands: the id, its own scope, and the row version it
//! last saw.
use uuid::Uuid;

/// A task as its caller names it: only the subject that created the task, in its own
/// tenant, may act on it; anyone else gets `NotFound`.
#[derive(Debug, Clone)]
pub struct TaskRef {
    /// The task's id.
    pub id: Uuid,
    /// The caller's tenant.
    pub tenant_id: String,
    /// The caller's subject.
    pub subject_id: String,
    /// The row version the caller last saw, if it wants the command to be conditional.
    pub expected_row_version: Option<i32>,
}
