//! A document's passages written from a split made outside any transaction (the start-up
//! backfill of documents stored before passages existed), if the document has not changed
//! since: an edit that came in between has written its own passages, so this one stands
//! aside.
use entity::Chunk;
use entity::{IndexingStatus, knowledge_document as document};
use sea_orm::{DatabaseConnection, DbErr};

use crate::store::{begin_write, documents};

/// How a document split, or why it could not.
#[derive(Debug)]
pub struct Split {
    /// Its passages (none when the split failed).
    pub chunks: Vec<Chunk>,
    /// The indexing status they start in.
    pub status: IndexingStatus,
    /// Why the split failed, if it did.
    pub error: Option<String>,
}

/// Writes `split` as the passages of `seen`'s revision, if that is still the document's;
/// whether it wrote them.
pub async fn write_split(
    db: &DatabaseConnection,
    seen: &document::Model,
    split: Split,
    now: i64,
) -> Result<bool, DbErr> {
    let txn = begin_write(db).await?;
    match documents::lock_any(&txn, seen.id).await? {
        Some(current) if current.revision == seen.revision => {
            documents::write_passages(&txn, &current, &split.chunks, now).await?;
            documents::set_indexing(&txn, seen.id, split.status, split.error, now).await?;
            txn.commit().await?;
            Ok(true)
        }
        _ => {
            txn.rollback().await?;
            Ok(false)
        }
    }
}
