//! A comparable dump of a database's schema: one sorted line per column, index,
//! constraint and trigger on PostgreSQL (from the catalogs, so two databases built by
//! different statement orders still compare equal), and one line per `sqlite_master` row
//! on SQLite (the stored CREATE statements, which is what SQLite itself goes by).
use anyhow::ensure;

use crate::{Backend, TestDb};

/// The catalog queries behind a PostgreSQL dump, each returning one text column.
const POSTGRES_QUERIES: [&str; 5] = [
    "SELECT 'column ' || table_name || '.' || column_name || ' #' || ordinal_position || ' ' || data_type \
       || coalesce('(' || character_maximum_length || ')', '') \
       || CASE is_nullable WHEN 'YES' THEN ' NULL' ELSE ' NOT NULL' END \
       || coalesce(' DEFAULT ' || column_default, '') \
     FROM information_schema.columns WHERE table_schema = 'public'",
    "SELECT 'index ' || tablename || '.' || indexname || ': ' || indexdef \
     FROM pg_indexes WHERE schemaname = 'public'",
    "SELECT 'constraint ' || conrelid::regclass::text || '.' || conname || ': ' || pg_get_constraintdef(oid) \
     FROM pg_constraint WHERE connamespace = 'public'::regnamespace",
    "SELECT 'trigger ' || event_object_table || '.' || trigger_name || ': ' || action_timing || ' ' \
       || event_manipulation || ' ' || action_statement \
     FROM information_schema.triggers WHERE trigger_schema = 'public'",
    "SELECT 'function ' || p.proname || ': ' || pg_get_function_identity_arguments(p.oid) || ' ' || p.prosrc \
     FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace",
];

/// The schema of `db`, one sorted line per object.
pub async fn dump(db: &TestDb) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    match db.backend {
        Backend::Postgres => {
            for query in POSTGRES_QUERIES {
                lines.extend(db.strings(query, []).await?);
            }
        }
        Backend::Sqlite => {
            let query =
                "SELECT type || ' ' || name || ' on ' || tbl_name || ': ' || coalesce(sql, '') FROM sqlite_master";
            lines.extend(db.strings(query, []).await?);
        }
    }
    lines.sort();
    Ok(lines)
}

/// Fails with the lines each side lacks unless the two dumps are equal.
pub fn assert_same(expected: &[String], actual: &[String]) -> anyhow::Result<()> {
    let missing: Vec<&String> = expected.iter().filter(|line| !actual.contains(line)).collect();
    let extra: Vec<&String> = actual.iter().filter(|line| !expected.contains(line)).collect();
    ensure!(
        missing.is_empty() && extra.is_empty() && expected.len() == actual.len(),
        "schemas differ\n  missing:\n    {}\n  unexpected:\n    {}",
        join(&missing),
        join(&extra),
    );
    Ok(())
}

fn join(lines: &[&String]) -> String {
    lines.iter().map(|line| line.as_str()).collect::<Vec<_>>().join("\n    ")
}
