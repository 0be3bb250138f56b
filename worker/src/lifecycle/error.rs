//! What a lifecycle operation can refuse.
use entity::Stage;
use sea_orm::DbErr;

/// A lifecycle operation's failure, in the categories callers act on.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// No such task for this caller (another subject's task answers the same).
    #[error("research task not found")]
    NotFound,
    /// The caller's `expectedRowVersion` is stale.
    #[error("row version {expected} is stale; the task is at row version {actual}")]
    StaleRowVersion {
        /// What the caller sent.
        expected: i32,
        /// What the row holds.
        actual: i32,
    },
    /// The stage rule does not allow the command now.
    #[error("{command} is not allowed while the task is {}", current.as_str())]
    NotAllowed {
        /// The command refused.
        command: &'static str,
        /// The stage the task is in.
        current: Stage,
    },
    /// The client's idempotency key was used before with different input.
    #[error("idempotency key was already used for a different task")]
    IdempotencyMismatch,
    /// The client's idempotency key names a task the caller can no longer read (its grant
    /// died), so replaying it would show what a read would not.
    #[error("idempotency key was used by a task the caller can no longer read")]
    IdempotencyKeyUnreadable,
    /// A quota of the tenant is used up; nothing was created.
    #[error("quota exceeded: {}", .0.what)]
    QuotaExceeded(QuotaRefusal),
    /// The worker's lease is gone (expired and re-claimed, canceled or paused); it must
    /// stop and write nothing more.
    #[error("lease lost")]
    LeaseLost,
    /// The task's grant no longer holds at a stage boundary; nothing was written, and the
    /// task should fail with the denial's message.
    #[error("{}", .0.message())]
    GrantDenied(crate::grant::GrantDenial),
    /// The task already holds the most steering notes it may.
    #[error("a task takes at most {0} steering notes")]
    TooManyNotes(u64),
    /// An approved plan holds more sub-queries than the task's `limits.max_sub_queries`.
    #[error("the plan holds {count} sub-queries; the task's limits.max_sub_queries is {max}")]
    PlanTooLong {
        /// How many the plan holds.
        count: usize,
        /// The task's limit.
        max: i64,
    },
    /// The task does not wait for the input given (a plan approval, a clarification).
    #[error("the task does not wait for {wanted}")]
    NotAwaiting {
        /// What the caller answered.
        wanted: &'static str,
        /// What the task waits for instead, if anything.
        awaiting: Option<&'static str>,
        /// The task's stage.
        current: Stage,
    },
    /// The thread has an unfinished turn (this one), and the new turn was to be refused then.
    #[error("the thread has a turn in flight")]
    TurnInFlight(uuid::Uuid),
    /// The thread already holds the most turns it may.
    #[error("a research thread holds at most {0} turns")]
    TooManyTurns(u64),
    /// The tenant is being erased: nothing new is accepted for it until the erasure ends.
    #[error("the tenant is being erased; nothing new is accepted for it")]
    TenantBeingErased,
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbErr),
}

/// Which quota refused, and when it frees up.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaRefusal {
    /// Its `quota_refusals_total{quota}` label (one of [`Self::LABELS`]).
    pub quota: &'static str,
    /// What the quota counts, in words.
    pub what: &'static str,
    /// Its value.
    pub limit: f64,
    /// When it resets (epoch ms), for the daily one.
    pub resets_at: Option<i64>,
}

impl QuotaRefusal {
    /// Every quota's metrics label.
    pub const LABELS: &[&str] = &["unfinished_tasks", "usd_per_day", "upload_bytes"];

    pub(super) fn counted(self) -> LifecycleError {
        metrics::counter!("quota_refusals_total", "quota" => self.quota).increment(1);
        LifecycleError::QuotaExceeded(self)
    }
}
