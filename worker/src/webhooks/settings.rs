//! `KFS_WEBHOOK_*`: how deliveries are sent.
use serde::Deserialize;

/// `KFS_WEBHOOK_*`: how deliveries are sent.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct WebhookSettings {
    /// `KFS_WEBHOOK_MAX_ATTEMPTS`: attempts before a delivery is `dead`.
    pub max_attempts: i32,
    /// `KFS_WEBHOOK_TIMEOUT_MS`: how long one attempt may take.
    pub timeout_ms: u64,
    /// `KFS_WEBHOOK_RETRY_BASE_MS`: the first retry's delay; it doubles per attempt.
    pub retry_base_ms: i64,
    /// `KFS_WEBHOOK_RETRY_CAP_MS`: the longest delay between attempts.
    pub retry_cap_ms: i64,
    /// `KFS_WEBHOOK_ALLOW_PRIVATE`: allow http and loopback, private and link-local
    /// addresses (development and tests only).
    pub allow_private: bool,
    /// How long a sender holds a delivery it leased, in milliseconds.
    pub lock_ms: i64,
    /// Deliveries one step sends at most (at once).
    pub batch_size: u64,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        // 30 s doubling to a cap of 8 h: the waits after thirteen attempts add up to
        // about a day (24.5 h, give or take the jitter).
        Self {
            max_attempts: 13,
            timeout_ms: 10_000,
            retry_base_ms: 30_000,
            retry_cap_ms: 8 * 3_600_000,
            allow_private: false,
            lock_ms: 60_000,
            batch_size: 16,
        }
    }
}
