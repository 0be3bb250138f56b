//! What fair claiming knows: which (tenant, space) pairs have unfinished work, how many
//! tasks each tenant and space runs now, which this worker served last, and the caps.
use std::collections::HashMap;

use entity::{Stage, research_task_job as job};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, EntityTrait, FromQueryResult,
    Iterable, QueryFilter, QuerySelect, Statement,
};
use uuid::Uuid;

/// One tenant's space.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, FromQueryResult)]
pub struct Pair {
    /// The tenant.
    pub tenant_id: String,
    /// The space.
    pub knowledge_space_id: Uuid,
}

/// The most tasks that may run at once (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// Per tenant (`KFS_MAX_RUNNING_PER_TENANT`).
    pub per_tenant: Option<u32>,
    /// Per space (`KFS_MAX_RUNNING_PER_SPACE`).
    pub per_space: Option<u32>,
}

impl Caps {
    /// Whether neither cap is set.
    pub fn is_unlimited(&self) -> bool {
        self.per_tenant.is_none() && self.per_space.is_none()
    }
}

/// Which pairs this worker served last: the tie-breaker after running counts, so a tenant
/// that just got a lease waits behind one that has not. Kept in memory, per worker.
#[derive(Debug, Default)]
pub struct Fairness {
    tick: u64,
    tenants: HashMap<String, u64>,
    pairs: HashMap<Pair, u64>,
}

/// Leases held now, per tenant and per pair.
#[derive(Debug, Default)]
pub struct Running {
    tenants: HashMap<String, u32>,
    pairs: HashMap<Pair, u32>,
}

impl Running {
    /// Whether the pair's tenant or space is at its cap.
    pub fn over(&self, pair: &Pair, caps: Caps) -> bool {
        let tenant = self.tenants.get(&pair.tenant_id).copied().unwrap_or(0);
        let space = self.pairs.get(pair).copied().unwrap_or(0);
        caps.per_tenant.is_some_and(|cap| tenant >= cap) || caps.per_space.is_some_and(|cap| space >= cap)
    }

    /// This worker just leased a job of the pair.
    pub fn add(&mut self, pair: &Pair) {
        *self.tenants.entry(pair.tenant_id.clone()).or_default() += 1;
        *self.pairs.entry(pair.clone()).or_default() += 1;
    }
}

/// The order pairs are tried in: fewest running in the tenant, tenant served longest ago,
/// fewest running in the space, space served longest ago, then by name.
type Order = (u32, u64, u32, u64, Pair);

impl Fairness {
    /// Where `pair` stands in line.
    pub fn order(&self, pair: &Pair, running: &Running) -> Order {
        (
            running.tenants.get(&pair.tenant_id).copied().unwrap_or(0),
            self.tenants.get(&pair.tenant_id).copied().unwrap_or(0),
            running.pairs.get(pair).copied().unwrap_or(0),
            self.pairs.get(pair).copied().unwrap_or(0),
            pair.clone(),
        )
    }

    /// `pair` just took a turn.
    pub fn served(&mut self, pair: &Pair) {
        self.tick += 1;
        self.tenants.insert(pair.tenant_id.clone(), self.tick);
        self.pairs.insert(pair.clone(), self.tick);
    }

    /// Drops what it remembers of pairs that have no unfinished work, so memory follows
    /// the active pairs, not every pair ever served.
    /// (Sets, not a search of `active`: the database's collation orders tenants, which
    /// need not be Rust's string order.)
    pub fn forget_all_but(&mut self, active: &[Pair]) {
        let pairs: std::collections::HashSet<&Pair> = active.iter().collect();
        let tenants: std::collections::HashSet<&str> = active.iter().map(|pair| pair.tenant_id.as_str()).collect();
        self.pairs.retain(|pair, _| pairs.contains(pair));
        self.tenants.retain(|tenant, _| tenants.contains(tenant.as_str()));
    }
}

/// Every (tenant, space) with unfinished tasks, in order: a skip scan over the partial
/// index of unfinished tasks (one probe per pair), never a read of the backlog itself.
pub async fn active_pairs(db: &DatabaseConnection) -> Result<Vec<Pair>, DbErr> {
    let unfinished = format!("\"stage\" IN ({})", migration::UNFINISHED);
    // SQLite's planner, without statistics, prefers the lease index for `stage IN (…)` and
    // sorts the whole backlog; name the partial index there. PostgreSQL picks it by itself.
    let jobs = match db.get_database_backend() {
        sea_orm::DatabaseBackend::Postgres => "\"research_task_jobs\"",
        _ => "\"research_task_jobs\" INDEXED BY \"research_task_jobs_unfinished_idx\"",
    };
    let next_space = format!(
        "(SELECT \"knowledge_space_id\" FROM {jobs} WHERE {unfinished} AND \"tenant_id\" = \"pairs\".\"t\" \
         AND \"knowledge_space_id\" > \"pairs\".\"s\" ORDER BY \"knowledge_space_id\" LIMIT 1)"
    );
    let next_tenant = format!(
        "(SELECT \"tenant_id\" FROM {jobs} WHERE {unfinished} AND \"tenant_id\" > \"pairs\".\"t\" \
         ORDER BY \"tenant_id\" LIMIT 1)"
    );
    let first_space_of_next = format!(
        "(SELECT \"knowledge_space_id\" FROM {jobs} WHERE {unfinished} AND \"tenant_id\" = {next_tenant} \
         ORDER BY \"knowledge_space_id\" LIMIT 1)"
    );
    let sql = format!(
        "WITH RECURSIVE \"pairs\" (\"t\", \"s\") AS ( \
           SELECT * FROM (SELECT \"tenant_id\", \"knowledge_space_id\" FROM {jobs} WHERE {unfinished} \
                          ORDER BY \"tenant_id\", \"knowledge_space_id\" LIMIT 1) AS \"first\" \
           UNION ALL \
           SELECT CASE WHEN {next_space} IS NOT NULL THEN \"pairs\".\"t\" ELSE {next_tenant} END, \
                  COALESCE({next_space}, {first_space_of_next}) \
           FROM \"pairs\" WHERE \"pairs\".\"t\" IS NOT NULL \
         ) \
         SELECT \"t\" AS \"tenant_id\", \"s\" AS \"knowledge_space_id\" FROM \"pairs\" WHERE \"t\" IS NOT NULL"
    );
    let statement = Statement::from_string(db.get_database_backend(), sql);
    Pair::find_by_statement(statement).all(db).await
}

#[derive(FromQueryResult)]
struct RunningRow {
    tenant_id: String,
    knowledge_space_id: Uuid,
    running: i64,
}

/// The leases held now, counted per pair (bounded by what the workers run, not by the
/// backlog: the lease index is read from the running stages' live leases only).
pub async fn running(db: &DatabaseConnection, now: i64) -> Result<Running, DbErr> {
    let rows = job::Entity::find()
        .select_only()
        .column(job::Column::TenantId)
        .column(job::Column::KnowledgeSpaceId)
        .column_as(job::Column::Id.count(), "running")
        .filter(job::Column::Stage.is_in(Stage::iter().filter(|stage| stage.is_running())))
        .filter(job::Column::LeaseExpiresAt.gt(now))
        .filter(job::Column::LeaseToken.is_not_null())
        .group_by(job::Column::TenantId)
        .group_by(job::Column::KnowledgeSpaceId)
        .into_model::<RunningRow>()
        .all(db)
        .await?;
    let mut running = Running::default();
    for row in rows {
        let count = u32::try_from(row.running).unwrap_or(u32::MAX);
        *running.tenants.entry(row.tenant_id.clone()).or_default() += count;
        running.pairs.insert(Pair { tenant_id: row.tenant_id, knowledge_space_id: row.knowledge_space_id }, count);
    }
    Ok(running)
}

#[derive(FromQueryResult)]
struct Count {
    n: i64,
}

/// The live leases of the pair's tenant (or, `in_space`, of the pair), read through the
/// lease index: the tenant's own index would walk its whole backlog, and SQLite's planner,
/// without statistics, picks it unless told otherwise.
async fn live_leases(txn: &DatabaseTransaction, pair: &Pair, in_space: bool, now: i64) -> Result<i64, DbErr> {
    let backend = txn.get_database_backend();
    let running: Vec<String> =
        Stage::iter().filter(|stage| stage.is_running()).map(|stage| format!("'{}'", stage.as_str())).collect();
    let (hint, marks) = if backend == sea_orm::DatabaseBackend::Postgres {
        ("", ["$1", "$2", "$3"])
    } else {
        ("INDEXED BY \"research_task_jobs_lease_idx\"", ["?", "?", "?"])
    };
    let mut sql = format!(
        "SELECT COUNT(*) AS \"n\" FROM \"research_task_jobs\" {hint} WHERE \"stage\" IN ({}) \
         AND \"lease_expires_at\" > {} AND \"lease_token\" IS NOT NULL AND \"tenant_id\" = {}",
        running.join(", "),
        marks[0],
        marks[1]
    );
    let mut values: Vec<sea_orm::Value> = vec![now.into(), pair.tenant_id.clone().into()];
    if in_space {
        sql.push_str(&format!(" AND \"knowledge_space_id\" = {}", marks[2]));
        values.push(pair.knowledge_space_id.into());
    }
    let statement = Statement::from_sql_and_values(backend, sql, values);
    Ok(Count::find_by_statement(statement).one(txn).await?.map_or(0, |row| row.n))
}

/// Inside the claiming transaction: whether the pair's tenant or space is at its cap,
/// counted again under a lock that makes two workers' claims for one tenant take turns
/// (PostgreSQL: an advisory lock on the tenant for the transaction; SQLite's write
/// transactions already take turns), so a cap holds however many workers race.
pub async fn over_cap_now(txn: &DatabaseTransaction, pair: &Pair, caps: Caps, now: i64) -> Result<bool, DbErr> {
    super::quota::lock_tenant(txn, &pair.tenant_id).await?;
    if let Some(cap) = caps.per_tenant
        && live_leases(txn, pair, false, now).await? >= i64::from(cap)
    {
        return Ok(true);
    }
    if let Some(cap) = caps.per_space
        && live_leases(txn, pair, true, now).await? >= i64::from(cap)
    {
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(tenant: &str) -> Pair {
        Pair { tenant_id: tenant.to_owned(), knowledge_space_id: Uuid::nil() }
    }

    #[test]
    fn memory_of_active_pairs_survives_whatever_order_they_come_in() {
        let mut fairness = Fairness::default();
        let (upper, lower) = (pair("Zeta"), pair("alpha"));
        fairness.served(&upper);
        fairness.served(&lower);
        // A collation that sorts case-insensitively lists "alpha" before "Zeta".
        fairness.forget_all_but(&[lower.clone(), upper.clone()]);
        assert_eq!((fairness.pairs.len(), fairness.tenants.len()), (2, 2));
        fairness.forget_all_but(&[lower]);
        assert_eq!(fairness.pairs.len(), 1);
        assert!(!fairness.tenants.contains_key("Zeta"));
    }
}
