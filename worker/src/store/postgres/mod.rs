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

/// `full_text` for several queries at once (`store::passages::full_text_for_queries`).
pub(crate) const FULL_TEXT_FOR_QUERIES: &str = statement!("full_text_for_queries");

mod backend;

/// The production backend ([`crate::store::backend::Backend`], in `backend.rs`).
pub(crate) struct Postgres;
