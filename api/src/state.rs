//! What every request handler shares.
use std::sync::Arc;

use sea_orm::DatabaseConnection;
use worker::Notifier;

use crate::config::Settings;
use crate::live::LiveHub;

/// Shared application state: the pool, the in-process notifier and the settings.
#[derive(Clone)]
pub struct AppState {
    /// The database pool.
    pub db: DatabaseConnection,
    /// In-process task signals (subscriptions, embedded worker wake-ups).
    pub notifier: Notifier,
    /// The application layer every resolver, tool and stream calls.
    pub app: Arc<worker::app::App>,
    /// Settings loaded once at start.
    pub settings: Arc<Settings>,
    /// Live fan-out of task events to subscriptions.
    pub live: LiveHub,
    /// Rate limits per principal and tenant, for this process.
    pub rates: Arc<crate::rate::RateLimits>,
    /// Token verification: secrets and identity providers with their cached keys.
    pub identity: Arc<crate::auth::Identity>,
    /// The embedded worker's loop ticks (empty without one), for readiness.
    pub worker_ticks: worker::observe::Ticks,
    /// The base every URL the server hands out is built from (`KFS_PUBLIC_URL`, or
    /// `http://` and the address bound), without a trailing slash.
    pub public_url: Arc<str>,
}

impl AppState {
    /// Whether `principal` is one of `KFS_OPERATOR_SUBJECTS`.
    pub fn is_operator(&self, principal: &worker::app::Principal) -> bool {
        self.app.rules.is_operator(principal)
    }
}
