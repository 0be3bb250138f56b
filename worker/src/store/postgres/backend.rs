//! PostgreSQL's side of [`Backend`]: row locks that skip what others hold, the hot paths
//! as one statement each, NOTIFY and LISTEN, advisory locks per tenant, `jsonb`
//! containment over the GIN index.
use entity::research_task_job as job;
use sea_orm::sea_query::{Condition, Expr, LockBehavior, LockType, SelectStatement};
use sea_orm::{ConnectionTrait, DatabaseBackend, DatabaseConnection, DbErr, FromQueryResult, QuerySelect, Statement};
use serde_json::{Value as Json, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::Postgres;
use crate::notify::{Notifier, TaskSignal};
use crate::store::backend::{Backend, Statements};
use crate::store::boundaries::rows::{BoundaryOutcome, BoundaryWrite};
use crate::store::claims::rows::{LeaseWrite, Leased};
use crate::store::rows::{NewTaskRows, PassageRow, Scope, TenantLock};

impl Backend for Postgres {
    const STATEMENTS: Statements = shared_statements!();

    /// A transaction's statements run one after another on one connection, so several at
    /// once keep the server's cores busy.
    const WRITERS_AT_ONCE: usize = 4;

    fn locking_rows<Q: QuerySelect>(query: Q) -> Q {
        query.lock(LockType::Update)
    }

    fn skipping_locked_rows<Q: QuerySelect>(query: Q) -> Q {
        query.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
    }

    fn skip_locked_rows(statement: &mut SelectStatement) -> bool {
        statement.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        true
    }

    fn id_list(ids: &[Uuid]) -> sea_orm::Value {
        ids.to_vec().into()
    }

    fn full_text_values(scope: Scope<'_>, terms: &[String], limit: i64) -> Vec<sea_orm::Value> {
        vec![
            scope.tenant_id.into(),
            scope.knowledge_space_id.into(),
            terms.join(" or ").into(),
            limit.into(),
            documents(scope),
        ]
    }

    /// Containment keeps types and reads the GIN index; `{k: [v]}` finds v inside a list
    /// the document holds.
    fn metadata_holds(key: &str, value: &Json) -> Option<Condition> {
        let mut any = Condition::any();
        for shape in [json!({ key: value }), json!({ key: [value] })] {
            any = any.add(Expr::cust_with_values(
                r#""knowledge_documents"."metadata" @> CAST($1 AS jsonb)"#,
                [shape.to_string()],
            ));
        }
        Some(any)
    }

    fn tenant_lock(lock: TenantLock) -> Option<&'static str> {
        Some(match lock {
            TenantLock::Creating => super::LOCK_TENANT_SHARED,
            TenantLock::Sealing => super::LOCK_TENANT_EXCLUSIVE,
            TenantLock::Counting => super::LOCK_TENANT_COUNTING,
        })
    }

    async fn create_task<C: ConnectionTrait>(txn: &C, rows: NewTaskRows) -> Result<job::Model, DbErr> {
        let NewTaskRows { snapshot, task, trace_context, outbox } = rows;
        super::create::create(txn, &snapshot, task, trace_context.as_ref(), &outbox).await
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

    /// One statement for them all (a research plan's sub-queries are searched together).
    async fn full_text_for_queries<C: ConnectionTrait>(
        conn: &C,
        scope: Scope<'_>,
        searched: &[&[String]],
        limit: i64,
    ) -> Result<Vec<Vec<PassageRow>>, DbErr> {
        if let [terms] = searched {
            let limit = u64::try_from(limit).unwrap_or_default();
            return Ok(vec![crate::store::passages::full_text(conn, scope, terms, limit).await?]);
        }
        let words: Vec<String> = searched.iter().map(|terms| terms.join(" or ")).collect();
        let words = serde_json::to_string(&words).map_err(|error| DbErr::Custom(error.to_string()))?;
        let statement = Statement::from_sql_and_values(
            DatabaseBackend::Postgres,
            super::FULL_TEXT_FOR_QUERIES,
            [scope.tenant_id.into(), scope.knowledge_space_id.into(), words.into(), limit.into(), documents(scope)],
        );
        let mut lists: Vec<Vec<PassageRow>> = searched.iter().map(|_| Vec::new()).collect();
        for result in conn.query_all_raw(statement).await? {
            let n: i64 = result.try_get("", "n")?;
            let list = usize::try_from(n - 1).ok().and_then(|index| lists.get_mut(index));
            let list = list
                .ok_or_else(|| DbErr::Custom(format!("full-text search answered query {n} of {}", searched.len())))?;
            list.push(PassageRow::from_query_result(&result, "")?);
        }
        Ok(lists)
    }

    async fn announce<C: ConnectionTrait>(txn: &C, signals: &[TaskSignal]) -> Result<(), DbErr> {
        super::listen::announce(txn, signals).await
    }

    fn spawn_listener(
        db: &DatabaseConnection,
        notifier: Notifier,
        on_gap: impl Fn() + Send + Sync + 'static,
        shutdown: CancellationToken,
        tracker: &TaskTracker,
    ) {
        super::listen::spawn(db, notifier, on_gap, shutdown, tracker);
    }
}

/// The scope's documents as PostgreSQL's `uuid[]` parameter (NULL for every document).
fn documents(scope: Scope<'_>) -> sea_orm::Value {
    match scope.documents {
        Some(ids) => ids.to_vec().into(),
        None => sea_orm::Value::Array(sea_orm::sea_query::ArrayType::Uuid, None),
    }
}
