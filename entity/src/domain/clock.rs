/// Milliseconds since the Unix epoch: the seed stores every time as a BIGINT of these.
pub fn now_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Where lifecycle code reads the time: the system clock in production, a clock of the
/// test's choosing in tests (so a lease can expire or a retry fall due without waiting).
#[derive(Clone)]
pub struct Clock(std::sync::Arc<dyn Fn() -> i64 + Send + Sync>);

impl Clock {
    /// The system clock ([`now_millis`]).
    pub fn system() -> Self {
        Self(std::sync::Arc::new(now_millis))
    }

    /// A clock that answers whatever `now` answers.
    pub fn from_fn(now: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(now))
    }

    /// Milliseconds since the Unix epoch, by this clock.
    pub fn now(&self) -> i64 {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({})", self.now())
    }
}
