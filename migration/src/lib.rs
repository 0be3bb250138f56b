//! The schema, as sea-orm-migration migrations. PostgreSQL is the production database and
//! must match the user's seed (migration 0015) exactly; SQLite gets an equivalent schema
//! for the embedded default. Every migration runs in one transaction on both backends and
//! is written so that replaying it (half-applied by another runner, or applied but not
//! recorded) succeeds and ends in the same schema.

pub use sea_orm_migration::prelude::*;

mod columns;
mod m0001_knowledge_spaces;
mod m0002_credentials_and_grants;
mod m0003_answer_traces;
mod m0004_knowledge_documents;
mod m0015_research_task_jobs;
mod m0016_answer_trace_task_link;
mod m0017_knowledge_passages;
mod m0018_answer_drafts;
mod m0019_fair_claims;
mod m0020_webhooks;
mod m0021_trace_contexts;
mod m0022_audit_and_deletions;
mod m0023_tenant_erasures;
mod m0024_citation_checks;
mod m0025_steering_notes;
mod m0026_input_waits;
mod m0027_document_files;
mod m0028_metadata_index;
mod m0029_quotes;
mod m0030_research_threads;
mod raw;

pub use m0019_fair_claims::UNFINISHED;

/// The ordered list of migrations.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m0001_knowledge_spaces::Migration),
            Box::new(m0002_credentials_and_grants::Migration),
            Box::new(m0003_answer_traces::Migration),
            Box::new(m0004_knowledge_documents::Migration),
            Box::new(m0015_research_task_jobs::Migration),
            Box::new(m0016_answer_trace_task_link::Migration),
            Box::new(m0017_knowledge_passages::Migration),
            Box::new(m0018_answer_drafts::Migration),
            Box::new(m0019_fair_claims::Migration),
            Box::new(m0020_webhooks::Migration),
            Box::new(m0021_trace_contexts::Migration),
            Box::new(m0022_audit_and_deletions::Migration),
            Box::new(m0023_tenant_erasures::Migration),
            Box::new(m0024_citation_checks::Migration),
            Box::new(m0025_steering_notes::Migration),
            Box::new(m0026_input_waits::Migration),
            Box::new(m0027_document_files::Migration),
            Box::new(m0028_metadata_index::Migration),
            Box::new(m0029_quotes::Migration),
            Box::new(m0030_research_threads::Migration),
        ]
    }
}
