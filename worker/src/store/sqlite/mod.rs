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

shared_statements!();

/// A list of ids as SQLite statements read it: a JSON array of hex strings, each turned
/// back into the 16 bytes SQLite stores a UUID as (`unhex("value")` over `json_each`).
pub(crate) fn id_list(ids: &[uuid::Uuid]) -> sea_orm::Value {
    let hex: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
    serde_json::Value::from(hex).to_string().into()
}

pub(crate) mod boundaries;
pub(crate) mod claims;
