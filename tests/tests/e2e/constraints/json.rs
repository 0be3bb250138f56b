//! JSON columns hold JSON on both backends: PostgreSQL's JSONB type parses it, and SQLite,
//! which stores text, checks every JSON column with `json_valid`.
use anyhow::{Context as _, ensure};
use entity::{AccessChannel, research_task_partial_result as partial, research_task_progress_event as progress};
use kfs_tests::{Backend, DbTest, TestDb, db_tests, fixtures, reported};
use sea_orm::{ActiveValue::Set, EntityTrait, Value};
use uuid::Uuid;

/// The JSON tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![json_columns_reject_text_that_is_not_json]
}

/// PostgreSQL's SQLSTATE for text that does not parse as the column's type.
const INVALID_TEXT_REPRESENTATION: &str = "22P02";

async fn json_columns_reject_text_that_is_not_json(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let delivery = fixtures::deliveries(&db, &task.job).await?.first().context("no delivery")?.id;
    let event = Uuid::now_v7();
    let mut row = fixtures::progress_row(&task.job, 1, "e1");
    row.id = Set(event);
    progress::Entity::insert(row).exec_without_returning(&db.db).await?;
    let evidence = Uuid::now_v7();
    let mut row = fixtures::partial_row(&task.job, 1, "p1");
    row.id = Set(evidence);
    partial::Entity::insert(row).exec_without_returning(&db.db).await?;
    let snapshot = fixtures::snapshot(&db, &task.member, AccessChannel::Interactive).await?;
    let trace = Uuid::now_v7();
    let mut row = fixtures::answer_trace_row(&snapshot);
    row.id = Set(trace);
    entity::answer_trace::Entity::insert(row).exec_without_returning(&db.db).await?;

    let columns = [
        ("research_task_jobs", "limits", task.job.id),
        ("research_task_jobs", "metadata", task.job.id),
        ("research_task_jobs", "cost", task.job.id),
        ("research_task_outbox", "payload", delivery),
        ("research_task_partial_results", "evidence_bundle", evidence),
        ("research_task_progress_events", "payload", event),
        ("knowledge_space_permission_snapshots", "permissions", snapshot.id),
        ("answer_traces", "evidence", trace),
    ];
    for (table, column, id) in columns {
        let what = format!("{table}.{column}");
        // A literal, not a bound string: PostgreSQL will not cast a text parameter to
        // JSONB, and the point is what the column accepts.
        let update = |text: &str| format!("UPDATE \"{table}\" SET \"{column}\" = '{text}' WHERE \"id\" = $1");
        let result = db.exec(&update("{\"not\": json}"), [Value::from(id)]).await;
        let error = result.err().with_context(|| format!("{what} accepted text that is not JSON"))?;
        let reported = reported(&error).with_context(|| format!("{what}: {error}"))?;
        match db.backend {
            Backend::Sqlite => {
                let wanted = format!("CHECK constraint failed: json_valid(\"{column}\")");
                ensure!(reported.message == wanted, "{what}: expected {wanted:?}, got {reported:?}");
            }
            Backend::Postgres => {
                let code = reported.code.as_deref();
                ensure!(code == Some(INVALID_TEXT_REPRESENTATION), "{what}: expected 22P02, got {reported:?}");
            }
        }
        let done = db.exec(&update("{\"is\": [\"json\"]}"), [Value::from(id)]).await.context(what.clone())?;
        ensure!(done.rows_affected() == 1, "{what}: valid JSON changed no row");
    }
    Ok(())
}
