//! What a research stage does, apart from the queue machinery that runs it: the
//! [`ResearchEngine`] interface and the built-in engine, which needs no network (planning
//! by splitting the query, retrieval by the database's full-text search, extractive
//! answers with numbered citations).
use std::collections::HashMap;

use entity::{ResearchMode, research_task_job as job};
use sea_orm::{DatabaseConnection, DbErr, FromQueryResult, Statement};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::EngineSettings;

/// Re-exported so engines written elsewhere implement [`ResearchEngine`] with the same macro.
pub use async_trait::async_trait;

/// What a stage may use: the database (for retrieval), the task, and a token cancelled
/// when the worker loses its lease (engines that spawn work must stop on it).
pub struct StageContext<'a> {
    /// The database the space's documents live in.
    pub db: &'a DatabaseConnection,
    /// The task as of its last checkpoint.
    pub job: &'a job::Model,
    /// Cancelled when the lease is lost or the worker stops.
    pub cancel: CancellationToken,
}

pub use crate::cost::CostReport;

/// Any error a stage may pass on as its cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A stage's output with what it cost.
#[derive(Debug, Clone)]
pub struct Staged<T> {
    /// What the stage produced.
    pub output: T,
    /// What producing it cost.
    pub cost: CostReport,
}

/// The sub-queries planning chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The mode actually used (`auto` resolved).
    pub mode: ResearchMode,
    /// The queries retrieval runs, the whole question first.
    pub sub_queries: Vec<String>,
}

/// One document found for one sub-query, or kept as evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Passage {
    /// The document.
    pub document_id: Uuid,
    /// Its title.
    pub title: String,
    /// The part of its content that matched.
    pub snippet: String,
    /// Higher is better; comparable within one backend only.
    pub score: f64,
}

/// The documents retrieval found for one sub-query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Retrieval {
    /// The sub-query.
    pub sub_query: String,
    /// Best first.
    pub passages: Vec<Passage>,
}

/// The answer generation wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// Text with numbered citations `[1]`, `[2]`… into `evidence`.
    pub text: String,
    /// The evidence cited, in citation order.
    pub evidence: Vec<Passage>,
}

/// Why a stage failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A limit in the task's `limits` was passed; retrying cannot help.
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// Something that may work next time (a database hiccup, a remote model's 503).
    #[error(transparent)]
    Transient(BoxError),
    /// What an earlier stage committed cannot be read back (a row written by another
    /// version, or damaged); retrying reads the same rows, so it may work after a fix.
    #[error("the output an earlier stage committed cannot be read")]
    Stored(#[source] serde_json::Error),
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbErr),
}

impl EngineError {
    /// Whether another attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::LimitExceeded(_) | Self::Stored(_))
    }
}

/// One method per pipeline stage. Engines that call a language model implement the same
/// interface; the pipeline owns leases, checkpoints and grants.
#[async_trait]
pub trait ResearchEngine: Send + Sync {
    /// Splits the question into the sub-queries retrieval runs.
    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError>;
    /// Finds candidate passages for every sub-query.
    async fn retrieve(&self, ctx: &StageContext<'_>, plan: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError>;
    /// Deduplicates and keeps the best evidence, up to `top_k`.
    async fn analyze(&self, ctx: &StageContext<'_>, found: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError>;
    /// Writes the answer, citing the evidence.
    async fn generate(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Result<Staged<Answer>, EngineError>;
}

/// Limits a task may set in its `limits` JSON; unknown keys are ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Limits {
    /// The most sub-queries planning may produce.
    pub max_sub_queries: Option<usize>,
    /// The most evidence analysis may keep.
    pub max_evidence: Option<usize>,
    /// Milliseconds after creation by which the task must be done.
    pub deadline_ms: Option<i64>,
}

impl Limits {
    /// Reads the task's limits; malformed values count as absent rather than failing.
    pub fn of(task: &job::Model) -> Self {
        serde_json::from_value(task.limits.clone()).unwrap_or_default()
    }
}

/// The built-in engine: no network, deterministic, so a re-run recomputes the same output.
#[derive(Debug, Clone, Default)]
pub struct BuiltinEngine {
    settings: EngineSettings,
}

impl BuiltinEngine {
    /// An engine with these prices and defaults.
    pub fn new(settings: EngineSettings) -> Self {
        Self { settings }
    }

    fn cost(&self, input: &str, output: &str) -> CostReport {
        let per_million = |per_1k: f64| per_1k * 1_000.0;
        CostReport::at_prices(
            estimate_tokens(input),
            estimate_tokens(output),
            per_million(self.settings.input_usd_per_1k_tokens),
            per_million(self.settings.output_usd_per_1k_tokens),
        )
    }
}

/// Roughly four characters per token, the usual rule of thumb for English.
pub fn estimate_tokens(text: &str) -> i64 {
    (text.chars().count() as i64 + 3) / 4
}

#[async_trait]
impl ResearchEngine for BuiltinEngine {
    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError> {
        let query = ctx.job.query.trim();
        let mode = resolve_mode(ctx.job.mode.unwrap_or(ResearchMode::Auto), query);
        let sub_queries = split_query(query, sub_query_count(mode));
        if let Some(max) = Limits::of(ctx.job).max_sub_queries
            && sub_queries.len() > max
        {
            return Err(EngineError::LimitExceeded(format!(
                "the {} plan needs {} sub-queries but limits.max_sub_queries is {max}",
                mode.as_str(),
                sub_queries.len()
            )));
        }
        let cost = self.cost(query, &sub_queries.join("\n"));
        Ok(Staged { output: Plan { mode, sub_queries }, cost })
    }

    async fn retrieve(&self, ctx: &StageContext<'_>, plan: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError> {
        let mut found = Vec::with_capacity(plan.sub_queries.len());
        let mut read = String::new();
        for sub_query in &plan.sub_queries {
            let passages =
                search(ctx.db, ctx.job.knowledge_space_id, sub_query, self.settings.candidates_per_sub_query).await?;
            for passage in &passages {
                read.push_str(&passage.snippet);
            }
            found.push(Retrieval { sub_query: sub_query.clone(), passages });
        }
        let cost = self.cost(&plan.sub_queries.join("\n"), &read);
        Ok(Staged { output: found, cost })
    }

    async fn analyze(&self, ctx: &StageContext<'_>, found: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError> {
        let top_k = ctx.job.top_k.and_then(|k| usize::try_from(k).ok()).unwrap_or(self.settings.default_top_k);
        if let Some(max) = Limits::of(ctx.job).max_evidence
            && top_k > max
        {
            return Err(EngineError::LimitExceeded(format!(
                "top_k {top_k} asks for more evidence than limits.max_evidence {max}"
            )));
        }
        let mut best: HashMap<Uuid, Passage> = HashMap::new();
        for passage in found.iter().flat_map(|retrieval| &retrieval.passages) {
            let keep = best.get(&passage.document_id).is_none_or(|kept| passage.score > kept.score);
            if keep {
                best.insert(passage.document_id, passage.clone());
            }
        }
        let mut evidence: Vec<Passage> = best.into_values().collect();
        // Ties broken by id so a re-run keeps exactly the same evidence.
        evidence.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.document_id.cmp(&b.document_id)));
        evidence.truncate(top_k);
        let read: String = found.iter().flat_map(|r| &r.passages).map(|p| p.snippet.as_str()).collect();
        let kept: String = evidence.iter().map(|p| p.snippet.as_str()).collect();
        Ok(Staged { output: evidence, cost: self.cost(&read, &kept) })
    }

    async fn generate(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Result<Staged<Answer>, EngineError> {
        let text = if evidence.is_empty() {
            "No document in this knowledge space matches the question.".to_owned()
        } else {
            let cited: Vec<String> = evidence
                .iter()
                .enumerate()
                .map(|(index, passage)| format!("{} [{}]", first_sentence(&passage.snippet), index + 1))
                .collect();
            cited.join(" ")
        };
        let read: String = evidence.iter().map(|p| p.snippet.as_str()).collect();
        let cost = self.cost(&format!("{}{read}", ctx.job.query), &text);
        Ok(Staged { output: Answer { text, evidence: evidence.to_vec() }, cost })
    }
}

/// `auto` picks by the question's length: short questions need one pass, long ones more.
fn resolve_mode(mode: ResearchMode, query: &str) -> ResearchMode {
    if mode != ResearchMode::Auto {
        return mode;
    }
    match query.split_whitespace().count() {
        0..=6 => ResearchMode::Fast,
        7..=16 => ResearchMode::Research,
        _ => ResearchMode::Deep,
    }
}

fn sub_query_count(mode: ResearchMode) -> usize {
    match mode {
        ResearchMode::Fast | ResearchMode::Auto => 1,
        ResearchMode::Research => 3,
        ResearchMode::Deep => 6,
    }
}

/// The whole question first, then its clauses, then pairs of its key terms, deduplicated,
/// up to `count`.
fn split_query(query: &str, count: usize) -> Vec<String> {
    let mut parts = vec![query.to_owned()];
    let clauses = query
        .split(['?', '.', ';', ',', '!'])
        .flat_map(|clause| clause.split(" and "))
        .map(str::trim)
        .filter(|clause| !clause.is_empty())
        .map(str::to_owned);
    parts.extend(clauses);
    let terms = search_terms(query);
    parts.extend(terms.chunks(2).map(|pair| pair.join(" ")));
    let mut seen = std::collections::HashSet::new();
    parts.retain(|part| seen.insert(part.to_lowercase()));
    parts.truncate(count.max(1));
    parts
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

#[derive(Debug, FromQueryResult)]
struct Hit {
    id: Uuid,
    title: String,
    content: String,
    score: f64,
}

/// Ranks the space's documents for one sub-query with the backend's full-text search.
pub async fn search(db: &DatabaseConnection, space_id: Uuid, query: &str, limit: u64) -> Result<Vec<Passage>, DbErr> {
    let terms = search_terms(query);
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    let backend = db.get_database_backend();
    let statement = if crate::db::is_postgres(backend) {
        // The expression must be exactly the one migration m0004 indexes with GIN.
        Statement::from_sql_and_values(
            backend,
            r#"SELECT "id", "title", "content",
                      ts_rank(to_tsvector('english'::regconfig, "title" || ' ' || "content"), q)::float8 AS "score"
               FROM "knowledge_documents", websearch_to_tsquery('english', $2) AS q
               WHERE "knowledge_space_id" = $1
                 AND to_tsvector('english'::regconfig, "title" || ' ' || "content") @@ q
               ORDER BY "score" DESC, "id"
               LIMIT $3"#,
            [space_id.into(), terms.join(" or ").into(), (limit as i64).into()],
        )
    } else {
        let matched: Vec<String> = terms.iter().map(|term| format!("\"{term}\"")).collect();
        Statement::from_sql_and_values(
            backend,
            r#"SELECT "document_id" AS "id", "title", "content", -bm25("knowledge_documents_fts") AS "score"
               FROM "knowledge_documents_fts"
               WHERE "knowledge_documents_fts" MATCH ? AND "knowledge_space_id" = ?
               ORDER BY "score" DESC, "id"
               LIMIT ?"#,
            [matched.join(" OR ").into(), space_id.into(), (limit as i64).into()],
        )
    };
    let hits = Hit::find_by_statement(statement).all(db).await?;
    Ok(hits
        .into_iter()
        .map(|hit| Passage {
            document_id: hit.id,
            snippet: snippet(&hit.content, &terms),
            title: hit.title,
            score: hit.score,
        })
        .collect())
}

/// About 240 characters of `content` around the first matching term.
fn snippet(content: &str, terms: &[String]) -> String {
    const WIDTH: usize = 240;
    let lower = content.to_lowercase();
    let hit = terms.iter().filter_map(|term| lower.find(term.as_str())).min().unwrap_or(0);
    // Byte offsets of the lower-cased text may differ from the original's; clamp to a
    // character boundary of the original.
    let mut start = hit.saturating_sub(WIDTH / 3).min(content.len());
    while !content.is_char_boundary(start) {
        start -= 1;
    }
    if let Some(space) = content[..start].rfind(['.', '\n'])
        && start - space < WIDTH / 3
    {
        start = space + 1;
    }
    let text: String = content[start..].trim_start().chars().take(WIDTH).collect();
    text.trim().to_owned()
}

/// The first sentence of a snippet (or all of it), as the extractive answer's clause.
fn first_sentence(snippet: &str) -> String {
    let end = snippet.find(['.', '!', '?']).map_or(snippet.len(), |at| at + 1);
    snippet[..end].trim().trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_split_into_more_sub_queries_the_deeper_they_go() {
        let query = "How do leases fence stale workers, and why does retry backoff use jitter?";
        assert_eq!(split_query(query, sub_query_count(ResearchMode::Fast)).len(), 1);
        let research = split_query(query, sub_query_count(ResearchMode::Research));
        assert_eq!(research[0], query);
        assert!(research.len() > 1 && research.len() <= 3);
        assert!(split_query(query, sub_query_count(ResearchMode::Deep)).len() > research.len());
    }

    #[test]
    fn search_terms_drop_punctuation_that_would_break_a_match_expression() {
        assert_eq!(search_terms("What is \"FTS5\" OR NEAR(x)?"), ["fts5", "near", "x"]);
    }
}
