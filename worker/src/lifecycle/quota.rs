//! Per-tenant quotas, checked where a task is created, inside its transaction and under
//! the tenant's lock, so racing creates cannot pass a quota together.
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbErr, EntityTrait, FromQueryResult, PaginatorTrait as _,
    QueryFilter, Statement,
};

use entity::research_task_job as job;

use super::LifecycleError;
use crate::db::is_postgres;

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// What one tenant may hold and spend (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quotas {
    /// Unfinished tasks (queued, running or paused) at once
    /// (`KFS_QUOTA_QUEUED_PER_TENANT`).
    pub unfinished_per_tenant: Option<u64>,
    /// US dollars the tenant's tasks created since 00:00 UTC may have spent
    /// (`KFS_QUOTA_USD_PER_TENANT_PER_DAY`).
    pub usd_per_tenant_per_day: Option<f64>,
}

/// Which quota refused, and when it frees up.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaRefusal {
    /// Its `quota_refusals_total{quota}` label (one of [`Self::LABELS`]).
    pub quota: &'static str,
    /// What the quota counts, in words.
    pub what: &'static str,
    /// Its value.
    pub limit: f64,
    /// When it resets (epoch ms), for the daily one.
    pub resets_at: Option<i64>,
}

impl QuotaRefusal {
    /// Every quota's metrics label.
    pub const LABELS: &[&str] = &["unfinished_tasks", "usd_per_day"];

    fn counted(self) -> LifecycleError {
        metrics::counter!("quota_refusals_total", "quota" => self.quota).increment(1);
        LifecycleError::QuotaExceeded(self)
    }
}

/// Makes the transaction the only one counting for `tenant` until it ends (PostgreSQL:
/// an advisory lock on the tenant; SQLite's write transactions already take turns).
pub(super) async fn lock_tenant(txn: &DatabaseTransaction, tenant: &str) -> Result<(), DbErr> {
    if is_postgres(txn.get_database_backend()) {
        let lock = Statement::from_sql_and_values(
            txn.get_database_backend(),
            "SELECT pg_advisory_xact_lock(hashtext($1))::text AS \"locked\"",
            [tenant.into()],
        );
        txn.query_one_raw(lock).await?;
    }
    Ok(())
}

#[derive(FromQueryResult)]
struct Spent {
    nanos: Option<i64>,
}

/// Refuses a new task of `tenant` when a quota is used up.
pub(super) async fn check(
    txn: &DatabaseTransaction,
    quotas: Quotas,
    tenant: &str,
    now: i64,
) -> Result<(), LifecycleError> {
    if quotas == Quotas::default() {
        return Ok(());
    }
    lock_tenant(txn, tenant).await?;
    if let Some(limit) = quotas.unfinished_per_tenant {
        let unfinished = job::Entity::find()
            .filter(job::Column::TenantId.eq(tenant))
            .filter(sea_orm::sea_query::Expr::cust(format!("\"stage\" IN ({})", migration::UNFINISHED)))
            .count(txn)
            .await?;
        if unfinished >= limit {
            let what = "unfinished research tasks per tenant";
            let quota = QuotaRefusal::LABELS[0];
            return Err(QuotaRefusal { quota, what, limit: limit as f64, resets_at: None }.counted());
        }
    }
    if let Some(limit) = quotas.usd_per_tenant_per_day {
        let day_start = now - now.rem_euclid(DAY_MS);
        let backend = txn.get_database_backend();
        let sql = if is_postgres(backend) {
            "SELECT SUM((\"cost\"->>'usd_nanos')::bigint)::bigint AS \"nanos\" FROM \"research_task_jobs\" \
             WHERE \"tenant_id\" = $1 AND \"created_at\" >= $2"
        } else {
            "SELECT CAST(SUM(json_extract(\"cost\", '$.usd_nanos')) AS INTEGER) AS \"nanos\" FROM \"research_task_jobs\" \
             WHERE \"tenant_id\" = ? AND \"created_at\" >= ?"
        };
        let statement = Statement::from_sql_and_values(backend, sql, [tenant.into(), day_start.into()]);
        let spent = Spent::find_by_statement(statement).one(txn).await?.and_then(|row| row.nanos).unwrap_or(0);
        if spent >= crate::cost::usd_to_nanos(limit) {
            let what = "US dollars spent per tenant per day";
            let quota = QuotaRefusal::LABELS[1];
            return Err(QuotaRefusal { quota, what, limit, resets_at: Some(day_start + DAY_MS) }.counted());
        }
    }
    Ok(())
}
