//! What fair claiming decides by: how many tasks each tenant and space runs now, which
//! pair this worker served last, and the caps. The store reads the pairs and the counts
//! (`store::claims`).
use std::collections::HashMap;

use sea_orm::{DatabaseTransaction, DbErr};

pub use crate::store::claims::Pair;
use crate::store::claims::{PairLeases, live_leases};
use crate::store::locks::{TenantLock, lock_tenant};

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

impl Running {
    /// The store's counts of live leases per pair, as fair claiming keeps them.
    pub fn of(counts: Vec<PairLeases>) -> Self {
        let mut running = Self::default();
        for row in counts {
            let count = u32::try_from(row.running).unwrap_or(u32::MAX);
            *running.tenants.entry(row.tenant_id.clone()).or_default() += count;
            running.pairs.insert(Pair { tenant_id: row.tenant_id, knowledge_space_id: row.knowledge_space_id }, count);
        }
        running
    }
}

/// Inside the claiming transaction: whether the pair's tenant or space is at its cap,
/// counted again under the tenant's counting lock, which makes two workers' claims for one
/// tenant take turns, so a cap holds however many workers race.
pub async fn over_cap_now(txn: &DatabaseTransaction, pair: &Pair, caps: Caps, now: i64) -> Result<bool, DbErr> {
    lock_tenant(txn, &pair.tenant_id, TenantLock::Counting).await?;
    if let Some(cap) = caps.per_tenant
        && live_leases(txn, &pair.tenant_id, None, now).await? >= i64::from(cap)
    {
        return Ok(true);
    }
    if let Some(cap) = caps.per_space
        && live_leases(txn, &pair.tenant_id, Some(pair.knowledge_space_id), now).await? >= i64::from(cap)
    {
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(tenant: &str) -> Pair {
        Pair { tenant_id: tenant.to_owned(), knowledge_space_id: uuid::Uuid::nil() }
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
