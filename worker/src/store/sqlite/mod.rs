//! What only SQLite does, or does its own way: FTS5 search, `INDEXED BY` hints, the
//! per-row forms of the batched statements (one writer in process: a statement per row
//! costs no round trip).

/// A statement assembled at compile time from `.sql` pieces in `sql/`, in order: pieces
/// are whole files (the grant rule is one), and nothing is filled into the text at run
/// time; only bound parameters vary.
macro_rules! statement {
    ($($piece:literal),+ $(,)?) => {
        concat!($(include_str!(concat!("sql/", $piece, ".sql")), "\n"),+)
    };
}

/// The grant rule's verdicts for a set of snapshots (`store::grants::verdicts`).
pub(crate) const GRANT_VERDICTS: &str = statement!("grant_verdicts.head", "grant_denial", "grant_verdicts.tail");

/// A list of ids as SQLite statements read it: a JSON array of hex strings, each turned
/// back into the 16 bytes SQLite stores a UUID as (`unhex("value")` over `json_each`).
pub(crate) fn id_list(ids: &[uuid::Uuid]) -> sea_orm::Value {
    let hex: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
    serde_json::Value::from(hex).to_string().into()
}

/// A task row's lease, stage and grant verdict, locked (`store::tasks::fence`).
pub(crate) const FENCE: &str = statement!("fence.head", "grant_denial", "fence.tail");

pub(crate) mod boundaries;
pub(crate) mod claims;

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

/// A space's passages by id (`store::passages::by_ids`).
pub(crate) const PASSAGES_BY_IDS: &str = statement!("passages_by_ids");
