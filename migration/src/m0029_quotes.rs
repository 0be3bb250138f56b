//! Quotes a reader can check: each passage keeps the offset map the splitter recorded
//! (`knowledge_passages.source_map`, where each character of its text came from in the
//! document's content; null for passages split before), and each answer's citation check
//! row keeps the answer's citations with their quotes (`answer_trace_citation_checks.citations`,
//! a JSON array; null for answers from before). Both tables are ours. Safe to replay.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DatabaseBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// (table, column, PostgreSQL type, SQLite type).
const COLUMNS: &[(&str, &str, &str, &str)] = &[
    ("knowledge_passages", "source_map", "TEXT", "TEXT"),
    (
        "answer_trace_citation_checks",
        "citations",
        "JSONB",
        "TEXT CONSTRAINT \"answer_trace_citation_checks_citations_ck\" CHECK (\"citations\" IS NULL OR json_valid(\"citations\"))",
    ),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (table, column, postgres, sqlite) in COLUMNS {
            let statement = match manager.get_database_backend() {
                DatabaseBackend::Postgres => {
                    format!("ALTER TABLE \"{table}\" ADD COLUMN IF NOT EXISTS \"{column}\" {postgres}")
                }
                _ if manager.has_column(table, column).await? => continue,
                _ => format!("ALTER TABLE \"{table}\" ADD COLUMN \"{column}\" {sqlite}"),
            };
            manager.get_connection().execute_unprepared(&statement).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (table, column, _, _) in COLUMNS {
            if manager.has_column(table, column).await? {
                let statement = format!("ALTER TABLE \"{table}\" DROP COLUMN \"{column}\"");
                manager.get_connection().execute_unprepared(&statement).await?;
            }
        }
        Ok(())
    }
}
