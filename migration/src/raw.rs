//! Running SQL scripts that the schema builder cannot express.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::ConnectionTrait;

/// Runs each statement of a script in order. PostgreSQL takes the whole script at once
/// (its `DO $tag$ … $tag$` blocks contain semicolons); SQLite's driver runs one statement
/// per call, so its scripts are split on lines that end with `;`.
pub async fn run_script(manager: &SchemaManager<'_>, script: &str) -> Result<(), DbErr> {
    let conn = manager.get_connection();
    match manager.get_database_backend() {
        sea_orm::DatabaseBackend::Postgres => {
            conn.execute_unprepared(script).await?;
        }
        _ => {
            for statement in split_statements(script) {
                conn.execute_unprepared(&statement).await?;
            }
        }
    }
    Ok(())
}

/// Splits a script into statements at lines ending with `;`, dropping `--` comments.
fn split_statements(script: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    for line in script.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("--") || trimmed.is_empty() {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(';') && !inside_trigger(&current) || trimmed == "END;" {
            statements.push(std::mem::take(&mut current));
        }
    }
    if !current.trim().is_empty() {
        statements.push(current);
    }
    statements
}

/// A `CREATE TRIGGER … BEGIN … END;` body holds semicolons of its own.
fn inside_trigger(statement: &str) -> bool {
    let upper = statement.to_ascii_uppercase();
    upper.contains("CREATE TRIGGER") && !upper.trim_end().ends_with("END;")
}

#[cfg(test)]
mod tests {
    use super::split_statements;

    #[test]
    fn trigger_bodies_stay_whole() {
        let script = "CREATE TABLE a (x INT);\n-- note\nCREATE TRIGGER t AFTER INSERT ON a BEGIN\n  INSERT INTO b VALUES (1);\n  INSERT INTO b VALUES (2);\nEND;\nCREATE INDEX i ON a (x);\n";
        let statements = split_statements(script);
        assert_eq!(statements.len(), 3, "{statements:?}");
        assert!(statements[1].contains("VALUES (2)"));
    }
}
