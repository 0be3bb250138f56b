//! An answer's citations as its trace records them: each quote the engine found in a
//! passage's text located in the passage's document through the offset map the splitter
//! stored with the passage (`research::citations` says how).
use std::collections::HashMap;

use sea_orm::DatabaseConnection;
use serde_json::Value;

use crate::research::citations::{CitationRecord, PassagePlace, QuoteRecord};
use crate::research::engine::{Answer, EngineError};
use crate::store;

/// The citations of `answer` (a task of `tenant_id`), as a JSON array of
/// [`CitationRecord`]s.
pub(super) async fn citation_records(
    db: &DatabaseConnection,
    tenant_id: &str,
    answer: &Answer,
) -> Result<Value, EngineError> {
    let ids: Vec<uuid::Uuid> = answer.evidence.iter().filter_map(|passage| passage.passage_id).collect();
    let places: HashMap<uuid::Uuid, PassagePlace> = store::passages::places(db, tenant_id, &ids)
        .await?
        .into_iter()
        .map(|row| {
            let source_map = row.source_map.as_deref().and_then(entity::SourceMap::decode);
            (row.id, PassagePlace { document_revision: row.document_revision, source_map })
        })
        .collect();
    let records: Vec<CitationRecord> = answer
        .citations
        .iter()
        .map(|citation| {
            let passage = citation.n.checked_sub(1).and_then(|at| answer.evidence.get(at));
            let quote = citation.quote.as_ref().zip(passage).and_then(|(quote, passage)| {
                let place = passage.passage_id.and_then(|id| places.get(&id));
                QuoteRecord::locate(quote, passage, place)
            });
            CitationRecord {
                n: citation.n,
                sentence: citation.sentence.clone(),
                verdict: Some(citation.verdict),
                quote,
            }
        })
        .collect();
    serde_json::to_value(records).map_err(EngineError::Stored)
}
