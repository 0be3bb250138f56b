//! The application layer: one operation per use case, the one door every channel (GraphQL,
//! MCP, the live layer, a worker's own schedules) goes through. An operation takes who is
//! asking (a [`Principal`], whose grant source it works out) and plain typed input, decides
//! every rule (roles, limits, idempotency, quotas) and answers typed output or an
//! [`AppError`] that carries its code. Channels parse, call one operation and render; they
//! open no transaction and name no store function.
//!
//! Writes to research tasks go on to `crate::lifecycle` (the only writer of their rows);
//! everything reaches the database through `crate::store`.
pub mod access;
pub mod audit;
pub mod batches;
pub mod deletes;
pub mod documents;
mod error;
pub mod feeds;
pub mod key_secret;
pub mod keys;
pub mod library;
pub mod limits;
pub mod lists;
pub mod operations;
mod principal;
pub mod spaces;
pub mod startup;
pub mod tasks;
pub mod threads;
pub mod webhooks;
mod writes;

use sea_orm::DatabaseConnection;

pub use error::AppError;
pub use principal::{ApiKeyCredential, Principal};

pub use crate::lifecycle::Quotas;
use crate::notify::Notifier;

/// What every operation runs against: the database, the signals that wake followers, and
/// the rules the process was configured with.
#[derive(Clone)]
pub struct App {
    /// The database pool.
    pub db: DatabaseConnection,
    /// In-process task signals (followers, an embedded worker).
    pub notifier: Notifier,
    /// The configured rules.
    pub rules: Rules,
    /// Splits documents into passages, a bounded number at a time in this process.
    pub splitter: crate::knowledge::index::Splitter,
    /// How written documents are indexed (whether embeddings follow).
    pub indexing: crate::knowledge::index::Indexing,
}

/// The configured rules operations apply.
#[derive(Debug, Clone)]
pub struct Rules {
    /// What one tenant may hold and spend.
    pub quotas: Quotas,
    /// How many claims a new task gets (`default_max_execution_attempts`).
    pub max_execution_attempts: i32,
    /// Whether webhook endpoints may point at private addresses.
    pub webhooks_allow_private: bool,
    /// Who operates the service (`KFS_OPERATOR_SUBJECTS`): a bare subject, or
    /// `<issuer>#<subject>` (see [`Principal::is_named_by`]).
    pub operator_subjects: std::sync::Arc<[String]>,
    /// The most text one document holds, in bytes (`KFS_MAX_CONTENT_BYTES`).
    pub max_content_bytes: usize,
    /// The largest file one upload may be, in bytes (`KFS_MAX_UPLOAD_BYTES`).
    pub max_upload_bytes: usize,
    /// The most bytes of uploaded files one tenant keeps
    /// (`KFS_QUOTA_UPLOAD_BYTES_PER_TENANT`).
    pub quota_upload_bytes_per_tenant: Option<u64>,
    /// The most turns one research thread holds (`KFS_THREAD_MAX_TURNS`).
    pub thread_max_turns: u64,
}

impl Rules {
    /// Whether `principal` is one of the operators.
    pub fn is_operator(&self, principal: &Principal) -> bool {
        self.operator_subjects.iter().any(|entry| principal.is_named_by(entry))
    }
}
