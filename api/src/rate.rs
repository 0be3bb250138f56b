//! Rate limits per principal (a subject, or an API key) and per tenant: requests per second
//! and GraphQL cost points per minute, as GCRA buckets (`governor`) kept in this process
//! (each replica limits on its own; with N replicas behind a balancer a caller gets up to N
//! times the rate). Every check reports the state of each bucket it touched, for the
//! `RateLimit-Policy` and `RateLimit` headers of the IETF httpapi draft; a refused check
//! says how long to wait. WebSocket connections per principal are counted here too.
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock as _, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::config::Settings;
use worker::app::Principal;

type Keyed = RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock, StateInformationMiddleware>;

/// One bucket kind: its name in the headers, its window and its limiter.
struct Bucket {
    name: &'static str,
    quota: u32,
    window_secs: u64,
    limiter: Keyed,
}

impl Bucket {
    fn new(name: &'static str, quota: Option<u32>, window_secs: u64) -> Option<Self> {
        let quota = NonZeroU32::new(quota?)?;
        let rate = match window_secs {
            1 => Quota::per_second(quota),
            _ => Quota::per_minute(quota),
        };
        let limiter = RateLimiter::dashmap(rate).with_middleware::<StateInformationMiddleware>();
        Some(Self { name, quota: quota.get(), window_secs, limiter })
    }

    /// Takes `cost` from `key`'s bucket; what is left, or how long until it would fit.
    fn take(&self, key: &str, cost: u32) -> State {
        let cost = NonZeroU32::new(cost.min(self.quota)).unwrap_or(NonZeroU32::MIN);
        let key = key.to_owned();
        let (remaining, wait) = match self.limiter.check_key_n(&key, cost) {
            Ok(Ok(snapshot)) => (snapshot.remaining_burst_capacity(), None),
            Ok(Err(not_until)) => (0, Some(not_until.wait_time_from(DefaultClock::default().now()))),
            // More than the whole quota at once can never fit; `cost` is capped above.
            Err(_) => (0, Some(Duration::from_secs(self.window_secs))),
        };
        State { name: self.name, quota: self.quota, window_secs: self.window_secs, remaining, wait }
    }
}

/// A bucket after a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// Its name in the headers (`requests`, `cost`, `tenant-requests`, `tenant-cost`).
    pub name: &'static str,
    /// Its quota per window.
    pub quota: u32,
    /// The window, in seconds.
    pub window_secs: u64,
    /// What is left of the quota now.
    pub remaining: u32,
    /// How long until the check would have passed, when it did not.
    pub wait: Option<Duration>,
}

impl State {
    /// Seconds until the bucket is full again (the draft's `t`).
    fn reset_secs(&self) -> u64 {
        let missing = u64::from(self.quota.saturating_sub(self.remaining));
        (missing * self.window_secs).div_ceil(u64::from(self.quota.max(1)))
    }
}

/// What a check decided, with every bucket it touched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    /// The buckets, principal's first.
    pub states: Vec<State>,
}

impl Checked {
    /// How long to wait, when any bucket refused.
    pub fn refused_for(&self) -> Option<Duration> {
        self.states.iter().filter_map(|state| state.wait).max()
    }

    /// Counts the refusal in `/metrics` (by bucket, never by caller), when it is one.
    fn count_refusal(self) -> Self {
        for state in self.states.iter().filter(|state| state.wait.is_some()) {
            metrics::counter!("rate_limited_total", "bucket" => state.name).increment(1);
        }
        self
    }

    /// Adds another check's buckets.
    pub fn merge(&mut self, other: Checked) {
        self.states.extend(other.states);
    }

    /// `RateLimit-Policy` and `RateLimit` header values, or `None` when no bucket applies.
    pub fn headers(&self) -> Option<(String, String)> {
        if self.states.is_empty() {
            return None;
        }
        let policy: Vec<String> = self
            .states
            .iter()
            .map(|state| format!("\"{}\";q={};w={}", state.name, state.quota, state.window_secs))
            .collect();
        let now: Vec<String> = self
            .states
            .iter()
            .map(|state| format!("\"{}\";r={};t={}", state.name, state.remaining, state.reset_secs()))
            .collect();
        Some((policy.join(", "), now.join(", ")))
    }
}

/// The process's rate limits.
pub struct RateLimits {
    requests: Option<Bucket>,
    cost: Option<Bucket>,
    tenant_requests: Option<Bucket>,
    tenant_cost: Option<Bucket>,
    sockets_per_principal: Option<usize>,
    sockets: Arc<Mutex<HashMap<String, usize>>>,
}

/// An open WebSocket counted against its principal; dropping it frees the place.
pub struct SocketSlot {
    key: String,
    sockets: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for SocketSlot {
    fn drop(&mut self) {
        let mut sockets = self.sockets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = sockets.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                sockets.remove(&self.key);
            }
        }
    }
}

/// Whom a principal's buckets belong to: its API key, else its subject in its tenant.
fn principal_key(principal: &Principal) -> String {
    match &principal.api_key {
        Some(key) => format!("key:{}", key.key_id),
        // As a JSON pair, so no choice of tenant and subject makes two callers one key.
        None => format!("subject:{}", serde_json::json!([principal.tenant_id, principal.subject_id])),
    }
}

impl RateLimits {
    /// The limits the settings ask for (each off unless set).
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            requests: Bucket::new("requests", settings.rate_requests_per_second, 1),
            cost: Bucket::new("cost", settings.rate_cost_points_per_minute, 60),
            tenant_requests: Bucket::new("tenant-requests", settings.rate_tenant_requests_per_second, 1),
            tenant_cost: Bucket::new("tenant-cost", settings.rate_tenant_cost_points_per_minute, 60),
            sockets_per_principal: settings.ws_max_connections_per_principal,
            sockets: Arc::default(),
        }
    }

    /// Counts one request (an HTTP request or a WebSocket operation) of `principal`.
    pub fn request(&self, principal: &Principal) -> Checked {
        self.take([&self.requests, &self.tenant_requests], principal, 1)
    }

    /// Counts one request that carries no credential, against its client address: anyone
    /// may send those, so they are limited where they come from.
    pub fn anonymous(&self, peer: std::net::IpAddr) -> Checked {
        let mut checked = Checked::default();
        if let Some(bucket) = &self.requests {
            checked.states.push(bucket.take(&format!("ip:{peer}"), 1));
        }
        checked.count_refusal()
    }

    /// Counts `points` of GraphQL cost of `principal`.
    pub fn cost(&self, principal: &Principal, points: u32) -> Checked {
        self.take([&self.cost, &self.tenant_cost], principal, points.max(1))
    }

    fn take(&self, [own, tenant]: [&Option<Bucket>; 2], principal: &Principal, amount: u32) -> Checked {
        let mut checked = Checked::default();
        if let Some(bucket) = own {
            checked.states.push(bucket.take(&principal_key(principal), amount));
        }
        if let Some(bucket) = tenant {
            checked.states.push(bucket.take(&principal.tenant_id, amount));
        }
        checked.count_refusal()
    }

    /// A place for one more WebSocket of `principal`, or `None` when it holds all it may.
    pub fn open_socket(&self, principal: &Principal) -> Option<SocketSlot> {
        let key = principal_key(principal);
        let mut sockets = self.sockets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = sockets.entry(key.clone()).or_default();
        if self.sockets_per_principal.is_some_and(|limit| *count >= limit) {
            metrics::counter!("rate_limited_total", "bucket" => "connections").increment(1);
            return None;
        }
        *count += 1;
        Some(SocketSlot { key, sockets: self.sockets.clone() })
    }

    /// Forgets buckets that are full again, so memory follows the active callers; call
    /// it now and then.
    pub fn forget_idle(&self) {
        for bucket in [&self.requests, &self.cost, &self.tenant_requests, &self.tenant_cost].into_iter().flatten() {
            bucket.limiter.retain_recent();
            bucket.limiter.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_name_every_bucket_with_its_quota_window_and_what_is_left() {
        let checked = Checked {
            states: vec![
                State { name: "requests", quota: 10, window_secs: 1, remaining: 7, wait: None },
                State { name: "cost", quota: 600, window_secs: 60, remaining: 0, wait: Some(Duration::from_secs(3)) },
            ],
        };
        let (policy, now) = checked.headers().expect("headers");
        assert_eq!(policy, "\"requests\";q=10;w=1, \"cost\";q=600;w=60");
        assert_eq!(now, "\"requests\";r=7;t=1, \"cost\";r=0;t=60");
        assert_eq!(checked.refused_for(), Some(Duration::from_secs(3)));
    }

    #[test]
    fn a_bucket_refuses_past_its_quota_and_says_how_long_to_wait() {
        let bucket = Bucket::new("requests", Some(2), 1).expect("bucket");
        assert_eq!(bucket.take("k", 1).remaining, 1);
        assert_eq!(bucket.take("k", 1).remaining, 0);
        let refused = bucket.take("k", 1);
        assert!(
            refused.wait.is_some_and(|wait| wait > Duration::ZERO && wait <= Duration::from_secs(1)),
            "{refused:?}"
        );
        assert_eq!(bucket.take("other", 1).remaining, 1, "keys have buckets of their own");
    }
}
