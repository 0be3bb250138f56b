//! Ranking a space's passages for one query: by full text (PostgreSQL `ts_rank` over the
//! GIN-indexed tsvector, SQLite FTS5 `bm25`), by vector (cosine similarity of the stored
//! embeddings, scored here, at most `max_passages_per_space` per search), and both fused by
//! reciprocal rank fusion. Every query is filtered by tenant and space: another space's
//! passages are never candidates.
use std::cmp::Ordering;
use std::collections::HashMap;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, FromQueryResult, Statement, Value};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::vectors;

/// Which ranker found a passage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ranker {
    /// The database's full-text search.
    FullText,
    /// Cosine similarity of embeddings.
    Vector,
}

/// A ranker's opinion of one passage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankerHit {
    /// The ranker.
    pub ranker: Ranker,
    /// 1 for its best passage.
    pub rank: usize,
    /// Its own score (`ts_rank`, negated `bm25`, or cosine similarity).
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
    /// Higher is better: the full-text score when it is the only ranker, else the fused
    /// reciprocal-rank score.
    pub score: f64,
    /// The rankers that found it, with their ranks.
    pub rankers: Vec<RankerHit>,
}

/// Where to search.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The space's tenant.
    pub tenant_id: &'a str,
    /// The space.
    pub knowledge_space_id: Uuid,
}

#[derive(Debug, FromQueryResult)]
struct Row {
    id: Uuid,
    document_id: Uuid,
    title: String,
    text: String,
    char_start: i32,
    char_end: i32,
    heading_path: serde_json::Value,
    score: f64,
}

impl Row {
    fn found(self, ranker: Ranker, rank: usize) -> Found {
        Found {
            passage_id: self.id,
            document_id: self.document_id,
            title: self.title,
            text: self.text,
            char_start: self.char_start,
            char_end: self.char_end,
            heading_path: serde_json::from_value(self.heading_path).unwrap_or_default(),
            score: self.score,
            rankers: vec![RankerHit { ranker, rank, score: self.score }],
        }
    }
}

/// The passage columns every search selects, with the document's title.
const COLUMNS: &str = r#"p."id", p."document_id", d."title", p."text", p."char_start", p."char_end", p."heading_path""#;

/// The best `limit` passages for `terms` (already reduced to safe words), best first.
pub async fn full_text(
    db: &DatabaseConnection,
    scope: Scope<'_>,
    terms: &[String],
    limit: u64,
) -> Result<Vec<Found>, DbErr> {
    if terms.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let backend = db.get_database_backend();
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let statement = if crate::db::is_postgres(backend) {
        // `search_vector` is the stored tsvector of context and text, GIN-indexed (m0017).
        Statement::from_sql_and_values(
            backend,
            format!(
                r#"SELECT {COLUMNS}, ts_rank(p."search_vector", q)::float8 AS "score"
                   FROM "knowledge_passages" p
                   JOIN "knowledge_documents" d ON d."id" = p."document_id",
                        websearch_to_tsquery('english', $3) AS q
                   WHERE p."tenant_id" = $1 AND p."knowledge_space_id" = $2 AND p."search_vector" @@ q
                   ORDER BY "score" DESC, p."id"
                   LIMIT $4"#
            ),
            [scope.tenant_id.into(), scope.knowledge_space_id.into(), terms.join(" or ").into(), limit.into()],
        )
    } else {
        let matched: Vec<String> = terms.iter().map(|term| format!("\"{term}\"")).collect();
        // The best matches first, from the FTS table alone (CROSS JOIN keeps SQLite from
        // running the MATCH once per passage of an outer loop). bm25 weights: the two
        // unindexed key columns, then the context (title and headings, repeated on every
        // passage of a document) at half the text's weight.
        Statement::from_sql_and_values(
            backend,
            format!(
                r#"SELECT {COLUMNS}, h."score" AS "score"
                   FROM (SELECT "passage_id", -bm25("knowledge_passages_fts", 0.0, 0.0, 0.5, 1.0) AS "score"
                         FROM "knowledge_passages_fts"
                         WHERE "knowledge_passages_fts" MATCH ? AND "knowledge_space_id" = ?
                         ORDER BY "score" DESC, "passage_id"
                         LIMIT ?) h
                   CROSS JOIN "knowledge_passages" p ON p."id" = h."passage_id"
                   JOIN "knowledge_documents" d ON d."id" = p."document_id"
                   WHERE p."tenant_id" = ? AND p."knowledge_space_id" = ?
                   ORDER BY h."score" DESC, p."id""#
            ),
            [
                matched.join(" OR ").into(),
                scope.knowledge_space_id.into(),
                limit.into(),
                scope.tenant_id.into(),
                scope.knowledge_space_id.into(),
            ],
        )
    };
    let rows = Row::find_by_statement(statement).all(db).await?;
    Ok(rows.into_iter().enumerate().map(|(index, row)| row.found(Ranker::FullText, index + 1)).collect())
}

/// [`full_text`] for several queries' terms at once: each list's best `limit` passages,
/// in the order given. On PostgreSQL that is one statement for them all (a research plan's
/// sub-queries are searched together); SQLite, in process, searches each in turn.
pub async fn full_text_many(
    db: &DatabaseConnection,
    scope: Scope<'_>,
    queries: &[Vec<String>],
    limit: u64,
) -> Result<Vec<Vec<Found>>, DbErr> {
    let backend = db.get_database_backend();
    let searched: Vec<&[String]> = queries.iter().map(Vec::as_slice).filter(|terms| !terms.is_empty()).collect();
    if !crate::db::is_postgres(backend) || searched.len() <= 1 || limit == 0 {
        let mut found = Vec::with_capacity(queries.len());
        for terms in queries {
            found.push(full_text(db, scope, terms, limit).await?);
        }
        return Ok(found);
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let words: Vec<String> = searched.iter().map(|terms| terms.join(" or ")).collect();
    let words = serde_json::to_string(&words).map_err(|error| DbErr::Custom(error.to_string()))?;
    // The statement above once per query (`n` counts them from 1), each ranked and limited
    // on its own.
    let statement = Statement::from_sql_and_values(
        backend,
        format!(
            r#"SELECT s."n", hit.* FROM jsonb_array_elements_text(CAST($3 AS jsonb)) WITH ORDINALITY AS s("words", "n")
               CROSS JOIN LATERAL (
                   SELECT {COLUMNS}, ts_rank(p."search_vector", q)::float8 AS "score"
                   FROM "knowledge_passages" p
                   JOIN "knowledge_documents" d ON d."id" = p."document_id",
                        websearch_to_tsquery('english', s."words") AS q
                   WHERE p."tenant_id" = $1 AND p."knowledge_space_id" = $2 AND p."search_vector" @@ q
                   ORDER BY "score" DESC, p."id"
                   LIMIT $4
               ) AS hit
               ORDER BY s."n", hit."score" DESC, hit."id""#
        ),
        [scope.tenant_id.into(), scope.knowledge_space_id.into(), words.into(), limit.into()],
    );
    let mut lists: Vec<Vec<Found>> = searched.iter().map(|_| Vec::new()).collect();
    for result in db.query_all_raw(statement).await? {
        let n: i64 = result.try_get("", "n")?;
        let list = usize::try_from(n - 1).ok().and_then(|index| lists.get_mut(index));
        let list =
            list.ok_or_else(|| DbErr::Custom(format!("full-text search answered query {n} of {}", searched.len())))?;
        let rank = list.len() + 1;
        list.push(Row::from_query_result(&result, "")?.found(Ranker::FullText, rank));
    }
    // Back in the order asked, with nothing for the queries that had no terms.
    let mut lists = lists.into_iter();
    Ok(queries
        .iter()
        .map(|terms| if terms.is_empty() { Vec::new() } else { lists.next().unwrap_or_default() })
        .collect())
}

#[derive(Debug, FromQueryResult)]
struct StoredVector {
    passage_id: Uuid,
    vector: Vec<u8>,
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
    let backend = db.get_database_backend();
    let dimensions = i32::try_from(query.len()).unwrap_or(i32::MAX);
    let max_compared = i64::try_from(max_compared).unwrap_or(i64::MAX);
    let statement = Statement::from_sql_and_values(
        backend,
        placeholders(
            backend,
            r#"SELECT "passage_id", "vector" FROM "knowledge_passage_embeddings"
               WHERE "tenant_id" = ? AND "knowledge_space_id" = ? AND "model" = ? AND "dimensions" = ?
               ORDER BY "passage_id"
               LIMIT ?"#,
        ),
        [scope.tenant_id.into(), scope.knowledge_space_id.into(), model.into(), dimensions.into(), max_compared.into()],
    );
    let stored = StoredVector::find_by_statement(statement).all(db).await?;
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
    let rows = passages(db, scope, &scored.iter().map(|(id, _)| *id).collect::<Vec<_>>()).await?;
    let mut by_id: HashMap<Uuid, Row> = rows.into_iter().map(|row| (row.id, row)).collect();
    Ok(scored
        .into_iter()
        .filter_map(|(id, similarity)| by_id.remove(&id).map(|row| Row { score: similarity, ..row }))
        .enumerate()
        .map(|(index, row)| row.found(Ranker::Vector, index + 1))
        .collect())
}

/// The passages with these ids in the scope (score 0).
async fn passages(db: &DatabaseConnection, scope: Scope<'_>, ids: &[Uuid]) -> Result<Vec<Row>, DbErr> {
    let backend = db.get_database_backend();
    let marks = vec!["?"; ids.len()].join(", ");
    let sql = format!(
        r#"SELECT {COLUMNS}, CAST(0.0 AS DOUBLE PRECISION) AS "score"
           FROM "knowledge_passages" p JOIN "knowledge_documents" d ON d."id" = p."document_id"
           WHERE p."tenant_id" = ? AND p."knowledge_space_id" = ? AND p."id" IN ({marks})"#
    );
    let mut values: Vec<Value> = vec![scope.tenant_id.into(), scope.knowledge_space_id.into()];
    values.extend(ids.iter().map(|id| Value::from(*id)));
    Row::find_by_statement(Statement::from_sql_and_values(backend, placeholders(backend, &sql), values)).all(db).await
}

/// `?` placeholders as the backend spells them (`$1`, `$2`… on PostgreSQL).
fn placeholders(backend: sea_orm::DatabaseBackend, sql: &str) -> String {
    if !crate::db::is_postgres(backend) {
        return sql.to_owned();
    }
    let mut numbered = String::with_capacity(sql.len() + 16);
    for (index, piece) in sql.split('?').enumerate() {
        if index > 0 {
            numbered.push_str(&format!("${index}"));
        }
        numbered.push_str(piece);
    }
    numbered
}

const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "how", "in", "is", "it", "of", "on",
    "or", "that", "the", "this", "to", "was", "what", "when", "where", "which", "who", "why", "with",
];

/// Lower-cased words of letters and digits, stop words dropped: safe to quote into an
/// FTS5 MATCH or a websearch query whatever the user typed.
pub fn search_terms(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        if !word.is_empty() && !STOP_WORDS.contains(&word.as_str()) && !terms.contains(&word) {
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

    #[test]
    fn placeholders_are_numbered_for_postgres() {
        let sql = placeholders(sea_orm::DatabaseBackend::Postgres, "a = ? AND b IN (?, ?)");
        assert_eq!(sql, "a = $1 AND b IN ($2, $3)");
        assert_eq!(placeholders(sea_orm::DatabaseBackend::Sqlite, "a = ?"), "a = ?");
    }
}
