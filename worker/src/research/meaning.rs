//! The embeddings the answer check's meaning fallback compares (`support::similar`),
//! fetched once per answer: the answer is checked with nothing known, which records every
//! claim and passage sentence the fallback would compare; those texts (at most
//! [`MAX_EMBEDDED_TEXTS`]) are embedded in one request through the retrieval port; the
//! caller then checks with them. Without an embeddings endpoint, or when the request fails,
//! the check is lexical alone (the failure is in the report). Embedding is not charged to
//! the task, as a query's embedding is not.
use serde_json::json;

use crate::research::engine::PassageSearch;
use crate::research::grounding::{self, Aids, Sources};
use crate::research::support::similar::Similarities;

/// The most texts one answer's check embeds; what is left over is checked lexically.
pub const MAX_EMBEDDED_TEXTS: usize = 256;

/// The similarities checking `text` (its `[n]` naming `cited[n - 1]`) against `sources`
/// may use, and what fetching them did (`null` when nothing was compared).
pub async fn similarities(
    text: &str,
    sources: &Sources<'_>,
    cited: &[usize],
    port: &dyn PassageSearch,
) -> (Similarities, serde_json::Value) {
    let Some(threshold) = port.support_threshold() else {
        return (Similarities::none(), serde_json::Value::Null);
    };
    let asking = Aids { similar: Similarities::at(threshold), ..Aids::default() };
    let _ = grounding::ground_with(text, sources, cited, &asking);
    let mut wanted = asking.similar.wanted();
    if wanted.is_empty() {
        return (asking.similar, serde_json::Value::Null);
    }
    let left_out = wanted.len().saturating_sub(MAX_EMBEDDED_TEXTS);
    wanted.truncate(MAX_EMBEDDED_TEXTS);
    let mut known = Similarities::at(threshold);
    match port.embed(&wanted).await {
        Ok(vectors) if vectors.len() == wanted.len() => {
            let embedded = wanted.len();
            for (text, vector) in wanted.into_iter().zip(vectors) {
                known.insert(text, vector);
            }
            (known, json!({ "outcome": "embedded", "texts": embedded, "left_out": left_out, "threshold": threshold }))
        }
        Ok(_) => (known, json!({ "outcome": "failed", "error": "the endpoint answered another number of vectors" })),
        Err(error) => {
            tracing::warn!(error = %error, "embedding for the answer check failed; checking words alone");
            (known, json!({ "outcome": "failed", "error": error.to_string() }))
        }
    }
}
