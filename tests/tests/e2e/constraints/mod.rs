//! The seed's constraints hold on both backends: every CHECK rejects what it must (and
//! accepts every value the domain enums use), unique indexes and foreign keys reject and
//! cascade as the seed says. Each test starts from valid rows (`kfs_tests::fixtures`) and
//! breaks one thing.
use kfs_tests::{DbTest, TestDb};
use sea_orm::{DbErr, ExecResult, Value};
use uuid::Uuid;

mod cascades;
mod earlier;
mod grants;
mod jobs;
mod journal;
mod json;
mod outbox;

/// Every constraint test.
pub fn tests() -> Vec<DbTest> {
    [
        jobs::tests(),
        outbox::tests(),
        journal::tests(),
        grants::tests(),
        cascades::tests(),
        json::tests(),
        earlier::tests(),
    ]
    .concat()
}

/// `UPDATE "table" SET "column" = value, … WHERE "id" = id`, with bound values.
async fn set(db: &TestDb, table: &str, id: Uuid, columns: &[(&str, Value)]) -> Result<ExecResult, DbErr> {
    let assignments: Vec<String> =
        columns.iter().enumerate().map(|(index, (column, _))| format!("\"{column}\" = ${}", index + 2)).collect();
    let sql = format!("UPDATE \"{table}\" SET {} WHERE \"id\" = $1", assignments.join(", "));
    let values = std::iter::once(Value::from(id)).chain(columns.iter().map(|(_, value)| value.clone()));
    db.exec(&sql, values).await
}

/// Fails unless the statement succeeded on exactly one row.
fn accepted(result: Result<ExecResult, DbErr>, what: &str) -> anyhow::Result<()> {
    match result {
        Ok(done) if done.rows_affected() == 1 => Ok(()),
        Ok(done) => anyhow::bail!("{what}: expected one row, changed {}", done.rows_affected()),
        Err(error) => anyhow::bail!("{what}: expected success, got {error}"),
    }
}

/// `DELETE FROM "table" WHERE "id" = id`.
async fn delete(db: &TestDb, table: &str, id: Uuid) -> Result<ExecResult, DbErr> {
    db.exec(&format!("DELETE FROM \"{table}\" WHERE \"id\" = $1"), [Value::from(id)]).await
}
