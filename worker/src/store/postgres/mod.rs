//! What only PostgreSQL does, or does its own way: statements written as text (`.sql`
//! files beside this one, bound parameters only), NOTIFY and LISTEN, advisory locks,
//! `FOR UPDATE SKIP LOCKED`, tsvector search.

/// A statement assembled at compile time from `.sql` pieces in `sql/`, in order: pieces
/// are whole files (the grant rule is one), and nothing is filled into the text at run
/// time; only bound parameters vary.
macro_rules! statement {
    ($($piece:literal),+ $(,)?) => {
        concat!($(include_str!(concat!("sql/", $piece, ".sql")), "\n"),+)
    };
}

pub(crate) mod listen;

/// The grant rule's verdicts for a set of snapshots (`store::grants::verdicts`).
pub(crate) const GRANT_VERDICTS: &str = statement!("grant_verdicts.head", "grant_denial", "grant_verdicts.tail");

/// A task row's lease, stage and grant verdict, locked (`store::tasks::fence`).
pub(crate) const FENCE: &str = statement!("fence.head", "grant_denial", "fence.tail");

/// The seal's lock on a tenant, shared (creators): class "kfse" and the tenant's hash.
pub(crate) const LOCK_TENANT_SHARED: &str =
    "SELECT pg_advisory_xact_lock_shared(1801876325, hashtext($1))::text AS \"locked\"";
/// The seal's lock on a tenant, exclusive (the seal).
pub(crate) const LOCK_TENANT_EXCLUSIVE: &str =
    "SELECT pg_advisory_xact_lock(1801876325, hashtext($1))::text AS \"locked\"";
/// The tenant's counting lock (quotas and caps): one key, a keyspace of its own.
pub(crate) const LOCK_TENANT_COUNTING: &str = "SELECT pg_advisory_xact_lock(hashtext($1))::text AS \"locked\"";

/// A batch of stage boundaries in one statement (`store::boundaries::write`).
pub(crate) const BOUNDARIES: &str =
    statement!("boundaries.head", "grant_denial", "boundaries.body", "any_endpoint", "boundaries.tail");

pub(crate) mod boundaries;
pub(crate) mod claims;
pub(crate) mod create;

/// A new task's rows in one statement (`store::tasks::create`).
pub(crate) const CREATE_TASK: &str = statement!("create_task");

/// Leases in one statement (`store::claims::lease`).
pub(crate) const CLAIMS: &str = statement!("claims.head", "any_endpoint", "claims.body", "grant_denial", "claims.tail");

/// Every pair with unfinished tasks (`store::claims::pairs`).
pub(crate) const PAIRS: &str = statement!("pairs");

/// A tenant's live leases (`store::claims::live_leases`).
pub(crate) const LIVE_LEASES_OF_TENANT: &str = statement!("live_leases");
/// A space's live leases (`store::claims::live_leases`).
pub(crate) const LIVE_LEASES_OF_SPACE: &str = statement!("live_leases", "live_leases.space");

/// What a tenant's tasks spent since a time (`store::quotas::usd_nanos_spent_since`).
pub(crate) const USD_NANOS_SPENT_SINCE: &str = statement!("usd_nanos_spent_since");

/// A task by id, if its subject reads it and its grant holds (`store::tasks::find_readable`).
pub(crate) const TASK_READABLE: &str = statement!("task_readable.head", "grant_denial", "task_readable.tail");

/// The grant rule as a condition on a `research_task_jobs` row, at one bound time
/// (`store::tasks::page`).
pub(crate) const GRANT_HOLDS_OF_JOBS: &str =
    statement!("grant_holds_of_jobs.head", "grant_denial", "grant_holds_of_jobs.tail");

/// A space's best passages for a query (`store::passages::full_text`).
pub(crate) const FULL_TEXT: &str = statement!("full_text");

/// A document's passages without a model's embedding (`store::embeddings::unembedded`).
pub(crate) const UNEMBEDDED: &str = statement!("unembedded");

/// Ready documents lacking a model's vectors wait again (`store::embeddings::reconcile`).
pub(crate) const RECONCILE_UNEMBEDDED: &str = statement!("reconcile_unembedded");

/// [`FULL_TEXT`] for several queries at once (`store::passages::full_text_for_queries`).
pub(crate) const FULL_TEXT_FOR_QUERIES: &str = statement!("full_text_for_queries");

/// A space's passages by id (`store::passages::by_ids`).
pub(crate) const PASSAGES_BY_IDS: &str = statement!("passages_by_ids");
