//! SQLite's side of [`Backend`]: one writer in process, so no row locks (a write
//! transaction begins IMMEDIATE and holds the one write lock), no tenant locks, the
//! batched writes row by row (a statement per row costs no round trip), nobody else to
//! signal, and metadata matched through `json_each`.
use entity::research_task_job as job;
use sea_orm::sea_query::{Condition, Expr, SelectStatement};
use sea_orm::{
    ActiveModelTrait as _, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait as _, IntoActiveModel as _,
    QuerySelect,
};
use serde_json::Value as Json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::Sqlite;
use crate::notify::{Notifier, TaskSignal};
use crate::store::backend::{Backend, Statements};
use crate::store::boundaries::rows::{BoundaryOutcome, BoundaryWrite};
use crate::store::claims::rows::{LeaseWrite, Leased};
use crate::store::passages;
use crate::store::rows::{NewTaskRows, PassageRow, Scope, TenantLock};

impl Backend for Sqlite {
    const STATEMENTS: Statements = shared_statements!();

    /// One writer.
    const WRITERS_AT_ONCE: usize = 1;

    fn locking_rows<Q: QuerySelect>(query: Q) -> Q {
        query
    }

    fn skipping_locked_rows<Q: QuerySelect>(query: Q) -> Q {
        query
    }

    fn skip_locked_rows(_statement: &mut SelectStatement) -> bool {
        false
    }

    /// A JSON array of hex strings, each turned back into the 16 bytes SQLite stores a
    /// UUID as (`unhex("value")` over `json_each`).
    fn id_list(ids: &[Uuid]) -> sea_orm::Value {
        let hex: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
        Json::from(hex).to_string().into()
    }

    fn full_text_values(scope: Scope<'_>, terms: &[String], limit: i64) -> Vec<sea_orm::Value> {
        let matched: Vec<String> = terms.iter().map(|term| format!("\"{term}\"")).collect();
        vec![
            matched.join(" OR ").into(),
            scope.knowledge_space_id.into(),
            limit.into(),
            scope.tenant_id.into(),
            scope.knowledge_space_id.into(),
            scope.documents.map_or(sea_orm::Value::String(None), Self::id_list),
        ]
    }

    /// The key as a JSON path; a key SQLite's path syntax cannot quote is left to the
    /// rule, as is null (SQL compares nothing equal to it).
    fn metadata_holds(key: &str, value: &Json) -> Option<Condition> {
        if key.contains(['"', '\\']) || value.is_null() {
            return None;
        }
        let atom: sea_orm::Value = match value {
            Json::String(text) => text.clone().into(),
            Json::Bool(flag) => i64::from(*flag).into(),
            Json::Number(number) => match number.as_i64() {
                Some(integer) => integer.into(),
                None => number.as_f64().unwrap_or_default().into(),
            },
            _ => return None,
        };
        Some(Condition::all().add(Expr::cust_with_values(
            r#"EXISTS (SELECT 1 FROM json_each("knowledge_documents"."metadata", ?) AS "element" WHERE "element"."atom" = ?)"#,
            [format!("$.\"{key}\"").into(), atom],
        )))
    }

    /// Write transactions already take turns.
    fn tenant_lock(_lock: TenantLock) -> Option<&'static str> {
        None
    }

    async fn create_task<C: ConnectionTrait>(txn: &C, rows: NewTaskRows) -> Result<job::Model, DbErr> {
        use entity::{permission_snapshot as snapshot, research_task_outbox as outbox};
        snapshot::Entity::insert(rows.snapshot.into_active_model().reset_all()).exec_without_returning(txn).await?;
        job::Entity::insert(rows.task.clone().into_active_model().reset_all()).exec_without_returning(txn).await?;
        if let Some(context) = rows.trace_context {
            crate::store::trace_contexts::insert(txn, context).await?;
        }
        outbox::Entity::insert(rows.outbox.into_active_model().reset_all()).exec_without_returning(txn).await?;
        Ok(rows.task)
    }

    async fn write_boundaries<C: ConnectionTrait>(
        txn: &C,
        boundaries: &[BoundaryWrite],
    ) -> Result<Vec<BoundaryOutcome>, DbErr> {
        super::boundaries::write(txn, boundaries).await
    }

    async fn lease<C: ConnectionTrait>(txn: &C, leases: &[LeaseWrite]) -> Result<Vec<Leased>, DbErr> {
        super::claims::lease(txn, leases).await
    }

    /// In process, each list in turn.
    async fn full_text_for_queries<C: ConnectionTrait>(
        conn: &C,
        scope: Scope<'_>,
        searched: &[&[String]],
        limit: i64,
    ) -> Result<Vec<Vec<PassageRow>>, DbErr> {
        let limit = u64::try_from(limit).unwrap_or_default();
        let mut found = Vec::with_capacity(searched.len());
        for terms in searched {
            found.push(passages::full_text(conn, scope, terms, limit).await?);
        }
        Ok(found)
    }

    async fn announce<C: ConnectionTrait>(_txn: &C, _signals: &[TaskSignal]) -> Result<(), DbErr> {
        Ok(())
    }

    fn spawn_listener(
        _db: &DatabaseConnection,
        _notifier: Notifier,
        _on_gap: impl Fn() + Send + Sync + 'static,
        _shutdown: CancellationToken,
        _tracker: &TaskTracker,
    ) {
    }
}
