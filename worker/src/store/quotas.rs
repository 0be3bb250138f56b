//! What a tenant's quotas count: its unfinished tasks, and what the tasks it created
//! since a time spent (the `usd_nanos` of their `cost`, read from JSON as each backend
//! reads it).
use entity::research_task_job as job;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait as _, QueryFilter, Statement};

use super::backend::{Backend, on_backend};

/// The tenant's unfinished tasks (queued, running or paused), counted on the partial index.
pub async fn unfinished_tasks<C: ConnectionTrait>(conn: &C, tenant_id: &str) -> Result<u64, DbErr> {
    job::Entity::find()
        .filter(job::Column::TenantId.eq(tenant_id))
        .filter(Expr::cust(format!("\"stage\" IN ({})", migration::UNFINISHED)))
        .count(conn)
        .await
}

/// Nanodollars the tenant's tasks created at or after `since` have spent.
pub async fn usd_nanos_spent_since<C: ConnectionTrait>(conn: &C, tenant_id: &str, since: i64) -> Result<i64, DbErr> {
    let sql = on_backend!(conn, |B| B::STATEMENTS.usd_nanos_spent_since);
    let statement = Statement::from_sql_and_values(conn.get_database_backend(), sql, [tenant_id.into(), since.into()]);
    Ok(match conn.query_one_raw(statement).await? {
        Some(row) => row.try_get::<Option<i64>>("", "nanos")?.unwrap_or(0),
        None => 0,
    })
}
