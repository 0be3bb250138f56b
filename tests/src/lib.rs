//! The shared test harness: a fresh migrated database per test on SQLite and PostgreSQL
//! ([`TestDb`]), a libtest-compatible runner that turns each database test into one trial
//! per backend ([`harness`]), fixtures, constraint assertions, schema dumps, a real server on
//! port 0 ([`server`]), a GraphQL-over-WebSocket client for it ([`ws`]), a scriptable
//! OpenAI-compatible embeddings endpoint ([`embedding_server`]), a scriptable
//! OpenAI-compatible chat-completions endpoint ([`openai_server`]), and the workspace's
//! `api` and `worker` binaries as child processes ([`process`]), and a webhook receiver that
//! verifies Standard Webhooks signatures ([`webhook_receiver`]), an identity provider
//! publishing a JWKS ([`jwks_server`]), an OTLP trace receiver ([`otlp_receiver`]), and what
//! the bench binaries share ([`bench`]), and large PDF and Word files made in code
//! ([`synthetic`]).
//!
//! Test binaries declare `harness = false`, list their tests with [`db_tests!`] and
//! [`plain_tests!`], and call [`harness::run`] from `main`.

pub mod bench;
mod database;
pub mod embedding_server;
pub mod fixtures;
pub mod harness;
pub mod hostile;
pub mod jwks_server;
pub mod openai_server;
pub mod otlp_receiver;
pub mod process;
pub mod rerank_server;
pub mod retrieval_eval;
pub mod schema;
pub mod server;
pub mod support_eval;
pub mod synthetic;
mod violation;
pub mod webhook_receiver;
pub mod ws;

pub use database::{Backend, TestConfig, TestDb, database_url};
pub use harness::{DbTest, PlainTest};
pub use violation::{Reported, Violation, reported};

/// `ensure!(left == right)` that fails with both sides printed, as `assert_eq!` would:
/// `ensure_eq!(row.status, OutboxStatus::Dispatched)`, optionally with a message after
/// them, as `assert_eq!` takes one.
#[macro_export]
macro_rules! ensure_eq {
    ($left:expr, $right:expr $(,)?) => {
        $crate::ensure_eq!($left, $right, "")
    };
    ($left:expr, $right:expr, $($context:tt)+) => {
        // A match, as in `assert_eq!`, so temporaries in either side live through the check.
        match (&$left, &$right) {
            (left, right) => ::anyhow::ensure!(
                *left == *right,
                "{} == {} failed {}\n   left: {:?}\n  right: {:?}",
                ::std::stringify!($left),
                ::std::stringify!($right),
                ::std::format!($($context)+),
                left,
                right
            ),
        }
    };
}
