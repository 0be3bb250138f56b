//! How one key of a task's `limits` JSON becomes its typed value: the one trait every limit
//! type implements (integers in bounds, flags, `filters`), apart from the table of keys
//! (`limits.rs`) so a limit type's own file need not know that table.
use serde_json::Value;

/// How one key's JSON value becomes its typed value.
pub trait LimitValue: Sized {
    /// The value, or what it must be instead (a phrase after "must be").
    fn from_json(value: &Value) -> Result<Self, String>;
}
