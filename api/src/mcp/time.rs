//! Instants as MCP answers show them.

/// An instant (epoch milliseconds) as RFC 3339.
pub fn rfc3339(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis).unwrap_or_default().to_rfc3339()
}
