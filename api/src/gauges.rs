//! What is open now in this process (subscriptions, WebSocket connections), counted in
//! gauges for as long as each lives, and readable by the operations page.

/// Counts something open in a gauge for as long as it lives (`kind` as its label, if any).
pub struct Counted {
    name: &'static str,
    kind: &'static str,
}

/// What is open now in this process, by gauge and kind, for the operations page.
static OPEN: std::sync::Mutex<std::collections::BTreeMap<(&'static str, &'static str), i64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn adjust(name: &'static str, kind: &'static str, by: i64) {
    let mut open = OPEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    *open.entry((name, kind)).or_default() += by;
}

/// How many of each counted thing are open in this process: `(gauge, kind, count)`.
pub fn open_counts() -> Vec<(&'static str, &'static str, i64)> {
    let open = OPEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    open.iter().map(|((name, kind), count)| (*name, *kind, *count)).collect()
}

impl Counted {
    /// Counts one more.
    pub fn new(name: &'static str, kind: &'static str) -> Self {
        Self::gauge(name, kind).increment(1.0);
        adjust(name, kind, 1);
        Self { name, kind }
    }

    fn gauge(name: &'static str, kind: &'static str) -> metrics::Gauge {
        if kind.is_empty() { metrics::gauge!(name) } else { metrics::gauge!(name, "kind" => kind) }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        Self::gauge(self.name, self.kind).decrement(1.0);
        adjust(self.name, self.kind, -1);
    }
}
