//! When a failed attempt is tried again: shared by the task lifecycle, the outbox, webhook
//! deliveries and the embeddings backlog.

/// Exponential backoff with jitter for failed attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first delay, in milliseconds.
    pub base_ms: i64,
    /// The longest delay, in milliseconds.
    pub cap_ms: i64,
}

impl RetryPolicy {
    /// The delay before attempt `attempts + 1`: `base · 2^(attempts-1)` capped, then a
    /// random point in its upper half, so workers that failed together do not retry together.
    pub fn delay_ms(&self, attempts: i32) -> i64 {
        let exponent = attempts.saturating_sub(1).clamp(0, 30) as u32;
        let ceiling = self.base_ms.max(1).saturating_mul(1_i64 << exponent).min(self.cap_ms.max(1));
        let floor = ceiling / 2;
        if floor >= ceiling { ceiling } else { rand::random_range(floor..=ceiling) }
    }
}
