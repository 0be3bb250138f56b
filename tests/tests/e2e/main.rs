//! End-to-end tests. Every database test runs twice, as `<module>::<name>::sqlite` and
//! `<module>::<name>::postgres`, each on a fresh migrated database; see the README's
//! "Run the tests" and `kfs_tests::harness`.
//!
//! `dead_code` is denied so that a test function missing from its module's `tests()` list
//! fails the build instead of silently never running.
#![deny(dead_code)]

use std::process::ExitCode;

mod api_authz;
mod api_batching;
mod api_lifecycle;
mod api_limits;
mod api_rate_limits;
mod api_schema;
mod api_subscriptions;
mod api_support;
mod audit;
mod constraints;
mod deleting;

mod graphiql_browser;
mod hostile_documents;
mod hostile_fuzz;
mod hostile_ingestion;
mod hostile_inputs;
mod hostile_outage;
mod hostile_sockets;
mod hostile_uploads;
mod http_contract;
mod identity;
mod knowledge_documents;
mod knowledge_embeddings;
mod knowledge_retrieval;
mod knowledge_uploads;
mod live_postgres_restart;
mod live_protocol;
mod live_replay;
mod live_revocation;
mod live_support;
mod live_worker;
mod logs;
mod mcp_endpoint;
mod migration_replay;
mod multiprocess;
mod operations;
mod ops_page;
mod research_answer;
mod research_citations;
mod research_filters;
mod research_followups;
mod research_openai;
mod research_rerank;
mod research_rounds;
mod research_steering;
mod research_support;
mod research_threads;
mod research_waits;
mod store;
mod traces;
mod webhooks;
mod worker_fairness;
mod worker_group_commit;
mod worker_lease;
mod worker_outbox;
mod worker_pipeline;
mod worker_retention;
mod worker_support;

fn main() -> ExitCode {
    // The servers' warnings and errors (an internal error's cause among them) on stderr,
    // for a failure that does not reproduce: `KFS_TEST_LOG=warn` (any filter directive).
    if let Ok(filter) = std::env::var("KFS_TEST_LOG") {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
    let db_tests = [
        api_authz::tests(),
        api_batching::tests(),
        api_lifecycle::tests(),
        api_rate_limits::tests(),
        api_limits::tests(),
        api_subscriptions::tests(),
        audit::tests(),
        constraints::tests(),
        deleting::tests(),
        store::tests(),
        graphiql_browser::tests(),
        hostile_documents::tests(),
        hostile_fuzz::tests(),
        hostile_ingestion::tests(),
        hostile_inputs::tests(),
        hostile_outage::tests(),
        hostile_sockets::tests(),
        hostile_uploads::tests(),
        http_contract::tests(),
        identity::tests(),
        knowledge_documents::tests(),
        knowledge_embeddings::tests(),
        knowledge_retrieval::tests(),
        knowledge_uploads::tests(),
        live_postgres_restart::tests(),
        live_protocol::tests(),
        live_replay::tests(),
        live_revocation::tests(),
        live_worker::tests(),
        logs::tests(),
        multiprocess::tests(),
        operations::tests(),
        ops_page::tests(),
        research_answer::tests(),
        research_citations::tests(),
        research_filters::tests(),
        research_followups::tests(),
        research_openai::tests(),
        research_rerank::tests(),
        research_rounds::tests(),
        research_steering::tests(),
        research_threads::tests(),
        research_waits::tests(),
        mcp_endpoint::tests(),
        migration_replay::tests(),
        traces::tests(),
        webhooks::tests(),
        worker_fairness::tests(),
        worker_group_commit::tests(),
        worker_lease::tests(),
        worker_pipeline::tests(),
        worker_retention::tests(),
        worker_outbox::tests(),
    ]
    .concat();
    kfs_tests::harness::run(db_tests, [api_schema::tests(), research_support::tests()].concat())
}
