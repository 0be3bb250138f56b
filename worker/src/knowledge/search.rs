//! Ranking a space's passages for one query: by full text (the store's, per backend), by
//! vector (cosine similarity of the stored embeddings, scored here, at most
//! `max_passages_per_space` per search), and both fused by reciprocal rank fusion. Every
//! read is filtered by tenant and space: another space's passages are never candidates.
//!
//! Vectors at scale: vectors are stored portably, as little-endian `f32`s with the model
//! name and length beside them, because no vector extension is available where this runs.
//! A vector search reads at most `KFS_EMBEDDINGS_MAX_PASSAGES_PER_SPACE` (20,000) of a
//! space's vectors and scores them here: about 20 MB read and a few milliseconds of
//! arithmetic per sub-query at 256 dimensions, 120 MB at 1,536, which is where this stops
//! being the right design. The move is local to [`vector`], the store's `passages::vectors`
//! and one migration: with pgvector, a `vector(n)` column and an HNSW index per model, and
//! `ORDER BY embedding <=> $query LIMIT k` inside the same tenant and space filter; the
//! fusion, the backlog and the evidence shape do not change. A separate vector engine
//! would instead be fed from the backlog loop after its fenced write commits, keyed by
//! passage id with tenant and space as filter fields, and treated like the endpoint: when
//! it is down, retrieval falls back to full text.
use std::cmp::Ordering;
use std::collections::HashMap;

use sea_orm::{DatabaseConnection, DbErr};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::vectors;
use crate::store::passages::{self, PassageRow};

/// Which ranker found a passage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ranker {
    /// The database's full-text search.
    FullText,
    /// Cosine similarity of embeddings.
    Vector,
    /// A reranking endpoint's order of the fused candidates (`KFS_RERANK_*`).
    Rerank,
}

/// A ranker's opinion of one passage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankerHit {
    /// The ranker.
    pub ranker: Ranker,
    /// 1 for its best passage.
    pub rank: usize,
    /// Its own score (`ts_rank`, negated `bm25`, cosine similarity, or the reranker's
    /// relevance score).
    pub score: f64,
}

/// One passage found for a query.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The passage.
    pub passage_id: Uuid,
    /// Its document.
    pub document_id: Uuid,
    /// The document's title.
    pub title: String,
    /// The passage's text.
    pub text: String,
    /// Where it starts in the document's content, in code points.
    pub char_start: i32,
    /// Where it ends (exclusive), in code points.
    pub char_end: i32,
    /// The headings above it.
    pub heading_path: Vec<String>,
    /// Its pages and its document's source.
    pub provenance: Provenance,
    /// Higher is better: the full-text score when it is the only ranker, else the fused
    /// reciprocal-rank score.
    pub score: f64,
    /// The rankers that found it, with their ranks.
    pub rankers: Vec<RankerHit>,
}

pub use crate::store::passages::Scope;

/// Where a passage points back to: the pages of the PDF it comes from (1-based,
/// inclusive) and its document's `sourceUri`; each key is left out of evidence when the
/// document has no such thing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_start: Option<i32>,
    /// The last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_end: Option<i32>,
    /// The document's source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_uri: Option<String>,
}

/// A found passage from a stored row, as ranked by `ranker` at `rank` with the row's score.
fn found(row: PassageRow, ranker: Ranker, rank: usize) -> Found {
    Found {
        passage_id: row.id,
        document_id: row.document_id,
        title: row.title,
        text: row.text,
        char_start: row.char_start,
        char_end: row.char_end,
        heading_path: serde_json::from_value(row.heading_path).unwrap_or_default(),
        provenance: Provenance { page_start: row.page_start, page_end: row.page_end, source_uri: row.source_uri },
        score: row.score,
        rankers: vec![RankerHit { ranker, rank, score: row.score }],
    }
}

/// Ranks the rows of one list, best first.
fn ranked(rows: Vec<PassageRow>, ranker: Ranker) -> Vec<Found> {
    rows.into_iter().enumerate().map(|(index, row)| found(row, ranker, index + 1)).collect()
}

/// The best `limit` passages for `terms` (already reduced to safe words), best first.
pub async fn full_text(
    db: &DatabaseConnection,
    scope: Scope<'_>,
    terms: &[String],
    limit: u64,
) -> Result<Vec<Found>, DbErr> {
    Ok(ranked(passages::full_text(db, scope, terms, limit).await?, Ranker::FullText))
}

/// [`full_text`] for several queries' terms at once: each list's best `limit` passages,
/// in the order given (a research plan's sub-queries are searched together).
pub async fn full_text_for_queries(
    db: &DatabaseConnection,
    scope: Scope<'_>,
    queries: &[Vec<String>],
    limit: u64,
) -> Result<Vec<Vec<Found>>, DbErr> {
    let lists = passages::full_text_for_queries(db, scope, queries, limit).await?;
    Ok(lists.into_iter().map(|rows| ranked(rows, Ranker::FullText)).collect())
}

/// The `limit` passages whose `model` embeddings are most similar to `query`, best first,
/// comparing at most `max_compared` stored vectors (the space's oldest passages first when
/// it holds more).
pub async fn vector(
    db: &DatabaseConnection,
    scope: Scope<'_>,
    model: &str,
    query: &[f32],
    limit: u64,
    max_compared: u64,
) -> Result<Vec<Found>, DbErr> {
    if query.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let dimensions = i32::try_from(query.len()).unwrap_or(i32::MAX);
    let stored = passages::vectors(db, scope, model, dimensions, max_compared).await?;
    let query_norm = vectors::norm(query);
    let mut scored: Vec<(Uuid, f64)> = stored
        .iter()
        .filter_map(|row| {
            let similarity = vectors::cosine_le_bytes(query, query_norm, &row.vector)?;
            Some((row.passage_id, similarity))
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    if scored.is_empty() {
        return Ok(Vec::new());
    }
    let rows = passages::by_ids(db, scope, &scored.iter().map(|(id, _)| *id).collect::<Vec<_>>()).await?;
    let mut by_id: HashMap<Uuid, PassageRow> = rows.into_iter().map(|row| (row.id, row)).collect();
    Ok(scored
        .into_iter()
        .filter_map(|(id, similarity)| by_id.remove(&id).map(|row| PassageRow { score: similarity, ..row }))
        .enumerate()
        .map(|(index, row)| found(row, Ranker::Vector, index + 1))
        .collect())
}

/// Words that say nothing about a topic: articles, auxiliaries, pronouns, question words.
/// They are not searched, and a claim or a question is not judged by them.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "did", "do", "does", "for", "from", "has", "have", "he",
    "her", "his", "how", "i", "in", "is", "it", "its", "of", "on", "or", "she", "that", "the", "their", "them", "they",
    "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "why", "with", "you",
];

/// Lower-cased words of letters and digits, stop words dropped: safe to quote into an
/// FTS5 MATCH or a websearch query whatever the user typed.
pub fn search_terms(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    // Seen words in a set: a long text (an answer, a passage) costs its length, not its square.
    let mut seen = std::collections::HashSet::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        if !word.is_empty() && !STOP_WORDS.contains(&word.as_str()) && seen.insert(word.clone()) {
            terms.push(word);
        }
    }
    terms
}

/// The constant of reciprocal rank fusion: large enough that one ranker's top few do not
/// drown the other's (the usual 60, from Cormack et al.).
const RRF_K: f64 = 60.0;

/// Fuses ranked lists by reciprocal rank: a passage scores `Σ 1 / (60 + rank)` over the
/// lists that found it, and keeps every ranker's rank. One list passes through unchanged.
pub fn fuse(lists: Vec<Vec<Found>>) -> Vec<Found> {
    let mut lists: Vec<Vec<Found>> = lists.into_iter().filter(|list| !list.is_empty()).collect();
    if lists.len() <= 1 {
        return lists.pop().unwrap_or_default();
    }
    let mut fused: HashMap<Uuid, Found> = HashMap::new();
    for found in lists.into_iter().flatten() {
        let contribution: f64 = found.rankers.iter().map(|hit| 1.0 / (RRF_K + hit.rank as f64)).sum();
        match fused.get_mut(&found.passage_id) {
            Some(kept) => {
                kept.score += contribution;
                kept.rankers.extend(found.rankers);
            }
            None => {
                fused.insert(found.passage_id, Found { score: contribution, ..found });
            }
        }
    }
    let mut fused: Vec<Found> = fused.into_values().collect();
    fused
        .sort_by(|a, b| b.score.partial_cmp(&a.score).unwrap_or(Ordering::Equal).then(a.passage_id.cmp(&b.passage_id)));
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(id: u128, ranker: Ranker, rank: usize) -> Found {
        Found {
            passage_id: Uuid::from_u128(id),
            document_id: Uuid::nil(),
            title: String::new(),
            text: String::new(),
            char_start: 0,
            char_end: 0,
            heading_path: Vec::new(),
            provenance: Default::default(),
            score: 1.0 / rank as f64,
            rankers: vec![RankerHit { ranker, rank, score: 1.0 / rank as f64 }],
        }
    }

    #[test]
    fn a_passage_both_rankers_found_beats_one_only_one_ranked_first() {
        let text = vec![found(1, Ranker::FullText, 1), found(2, Ranker::FullText, 2)];
        let vector = vec![found(3, Ranker::Vector, 1), found(2, Ranker::Vector, 2)];
        let fused = fuse(vec![text, vector]);
        let order: Vec<u128> = fused.iter().map(|f| f.passage_id.as_u128()).collect();
        assert_eq!(order[0], 2, "found second by both: 2/62 beats 1/61");
        assert_eq!(fused[0].rankers.len(), 2);
        assert_eq!(fused.len(), 3);
    }

    #[test]
    fn one_list_keeps_its_own_scores() {
        let text = vec![found(1, Ranker::FullText, 1)];
        let fused = fuse(vec![text.clone(), Vec::new()]);
        assert_eq!(fused, text);
    }

    #[test]
    fn search_terms_drop_punctuation_that_would_break_a_match_expression() {
        assert_eq!(search_terms("What is \"FTS5\" OR NEAR(x)?"), ["fts5", "near", "x"]);
    }
}
