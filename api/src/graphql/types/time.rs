//! Times as GraphQL shows them.
use chrono::{DateTime, Utc};

/// An epoch-milliseconds column as a DateTime. Columns hold times the service wrote, so
/// the out-of-range fallback (the epoch) is never expected to show.
pub fn datetime(millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap_or_default()
}
