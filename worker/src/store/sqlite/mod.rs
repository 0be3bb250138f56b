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
