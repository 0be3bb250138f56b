//! Webhooks (Standard Webhooks): each progress event of a task becomes one durable
//! delivery per matching endpoint of the task's creator, written in the event's own
//! transaction ([`enqueue`]); a worker loop leases due deliveries, POSTs them signed
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`), records every attempt, and
//! retries with exponential backoff and jitter until a 2xx or the last attempt (`dead`).
//! Bodies carry ids, never task content: receivers fetch with their own credential.
pub mod address;
mod enqueue;
mod send;

pub use enqueue::{enqueue, event_name};
pub use send::{DeliveryPolicy, deliver_due};

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

/// The `webhook-id` of a delivery: stable across every attempt and redelivery.
pub fn message_id(delivery: uuid::Uuid) -> String {
    format!("msg_{}", delivery.simple())
}

/// A new endpoint's signing secret: `whsec_` and 32 random bytes in base64.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("whsec_{}", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes))
}
