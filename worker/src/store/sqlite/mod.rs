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

mod backend;
pub(crate) mod boundaries;
pub(crate) mod claims;

/// The embedded default ([`crate::store::backend::Backend`], in `backend.rs`).
pub(crate) struct Sqlite;
