//! What a research stage does, apart from the queue machinery that runs it: the
//! [`ResearchEngine`] interface and the built-in engine, which needs no language model (planning
//! by splitting the query, retrieval of passages by full text or hybrid search, extractive
//! answers with numbered citations).
use std::collections::{HashMap, HashSet};

use entity::{ResearchMode, TaskLimits, research_task_job as job};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use unicode_segmentation::UnicodeSegmentation as _;

use crate::knowledge::search::{Found, Provenance};
pub use crate::knowledge::search::{Ranker, RankerHit, search_terms};
use crate::model_settings::EngineSettings;
pub use crate::research::answer::{AnswerSink, Composer};
use crate::research::cited::{AnswerCitation, answer_citations};
use crate::research::grounding::CitedSentence;
use crate::research::rerank::Reranker;

/// Re-exported so engines written elsewhere implement [`ResearchEngine`] with the same macro.
pub use async_trait::async_trait;

/// The retrieval port: how an engine reaches the passages of its task's space. The
/// pipeline gives each stage one (searching the database); an engine never sees where the
/// passages live.
#[async_trait]
pub trait PassageSearch: Send + Sync {
    /// How many rankers each search runs (full text, and vectors when embeddings are on):
    /// every one reads its own candidates, which a round's budget counts.
    fn rankers(&self) -> i64;

    /// For each of `queries`, in order, the best `limit` passages of `task`'s space among
    /// the documents its `limits.filters` allow, best first.
    async fn search(&self, task: &job::Model, queries: &[String], limit: u64) -> Result<Vec<Vec<Found>>, BoxError>;

    /// The similarity at which the answer check accepts a sentence by meaning
    /// (`research::support::similar`): `Some` when the search has an embeddings endpoint.
    fn support_threshold(&self) -> Option<f64> {
        None
    }

    /// The embeddings of `texts`, in order, from the search's endpoint.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        let _ = texts;
        Err("no embeddings endpoint is configured".into())
    }
}

/// What a stage may use: the passages of the task's space (through the retrieval port),
/// the task, a token cancelled when the worker loses its lease (engines that spawn work
/// must stop on it), and where generation writes its answer as it goes.
pub struct StageContext<'a> {
    /// Where the task's passages are searched.
    pub passages: &'a dyn PassageSearch,
    /// The task as of its last checkpoint.
    pub job: &'a job::Model,
    /// Cancelled when the lease is lost or the worker stops.
    pub cancel: CancellationToken,
    /// Generation pushes its answer here (through a [`Composer`]) while it writes it, for
    /// `researchTaskAnswer` subscribers; other stages leave it alone.
    pub answer: &'a AnswerSink,
    /// Engines that call a model record every call here as it completes (or breaks), so
    /// what a stage spent counts even when the stage fails.
    pub calls: &'a crate::research::cost::CallLog,
    /// The steering notes added to the task, oldest first (read for analysis and
    /// generation, which take them into account; empty for other stages).
    pub notes: &'a [String],
    /// The clarifying question asked before planning and the person's answer, when one
    /// was asked (read for every stage of a task that may ask).
    pub clarification: Option<&'a Clarification>,
    /// How long the task has waited for people so far, in milliseconds: time that does
    /// not count against `limits.deadline_ms`.
    pub waited_ms: i64,
    /// The follow-up's thread (earlier turns, the standalone query); `None` outside a
    /// thread or for a thread's first turn.
    pub thread: Option<&'a crate::research::thread::ThreadView>,
}

/// A clarifying question an engine asked before planning, and what the person answered
/// (`None`: the task was resumed, or the wait timed out, without an answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clarification {
    /// The question.
    pub question: String,
    /// The answer.
    pub answer: Option<String>,
}

impl StageContext<'_> {
    /// The question with the steering notes after it: what the built-in engine covers
    /// and answers.
    pub fn question_with_notes(&self) -> String {
        let mut asked = self.question().to_owned();
        for note in self.guidance() {
            asked.push('\n');
            asked.push_str(note.trim());
        }
        asked
    }

    /// The question researched: the standalone query of a follow-up (once planning made
    /// it), else the question as asked.
    pub fn question(&self) -> &str {
        self.thread.and_then(|thread| thread.standalone.get()).map_or_else(|| self.job.query.trim(), String::as_str)
    }

    /// What a model prompt shows besides the question: the earlier turns of the thread
    /// (oldest first), then [`StageContext::guidance`].
    pub fn model_guidance(&self) -> Vec<String> {
        let mut lines = self.thread.map(crate::research::thread::ThreadView::lines).unwrap_or_default();
        lines.extend(self.guidance());
        lines
    }

    /// What the person who asked added to the question, as prompts show it: the answer
    /// to the clarifying question (when there is one), then the steering notes.
    pub fn guidance(&self) -> Vec<String> {
        let mut lines = Vec::with_capacity(self.notes.len() + 1);
        if let Some(Clarification { question, answer: Some(answer) }) = self.clarification {
            lines.push(format!("Asked \"{}\", they answered: {}", question.trim(), answer.trim()));
        }
        lines.extend(self.notes.iter().cloned());
        lines
    }

    /// What the task may still spend and until when, for calls made outside the call log.
    pub fn spend(&self) -> crate::research::lead::Spend {
        let deadline = limits_of(self.job).deadline_ms.map(|ms| self.job.created_at.saturating_add(ms.get()));
        crate::research::lead::Spend { budget_left: self.budget_left_nanos(), deadline }
    }

    /// What the task may still spend before its budget is passed, in nanodollars; `None`
    /// without a budget.
    pub fn budget_left_nanos(&self) -> Option<i64> {
        let budget = crate::research::cost::usd_to_nanos(self.job.budget_usd?);
        Some(budget - crate::research::cost::spent_nanos(&self.job.cost) - self.calls.total().usd_nanos)
    }
}

pub use crate::research::cost::CostReport;
pub use crate::tokens::estimate_tokens;

/// Any error a stage may pass on as its cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A stage's output with what it cost.
#[derive(Debug, Clone)]
pub struct Staged<T> {
    /// What the stage produced.
    pub output: T,
    /// What producing it cost.
    pub cost: CostReport,
    /// What the engine says about how it went (the model used, a fallback taken, the
    /// calls it made and what each cost), recorded in the stage's event as `engine`, and
    /// added into the task's `cost` under the stage as `calls` when it has them; null for
    /// nothing to say.
    pub report: serde_json::Value,
}

impl<T> Staged<T> {
    /// An output and its cost, with nothing to report.
    pub fn new(output: T, cost: CostReport) -> Self {
        Self { output, cost, report: serde_json::Value::Null }
    }
}

/// The sub-queries planning chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The mode actually used (`auto` resolved).
    pub mode: ResearchMode,
    /// The queries retrieval runs, the whole question first.
    pub sub_queries: Vec<String>,
}

/// One passage found for one sub-query, or kept as evidence: the JSON item of retrieval
/// bundles, the evidence bundle and the answer trace's `evidence`. Its text is a copy, so
/// the record of what research used survives an edit or removal of the document.
/// Bundles written before passages existed lack the passage fields; they read as absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Passage {
    /// The document.
    pub document_id: Uuid,
    /// Its title.
    pub title: String,
    /// What to show for it: the passage's text.
    pub snippet: String,
    /// Higher is better: the full-text score when full text is the only ranker, else the
    /// fused reciprocal-rank score, or the reranker's relevance score when its sub-query
    /// was reranked; comparable within one task only.
    pub score: f64,
    /// The passage.
    #[serde(default)]
    pub passage_id: Option<Uuid>,
    /// The passage's text, without markup.
    #[serde(default)]
    pub text: String,
    /// Where it starts in the document's content, in Unicode code points.
    #[serde(default)]
    pub char_start: Option<i32>,
    /// Where it ends (exclusive), in Unicode code points.
    #[serde(default)]
    pub char_end: Option<i32>,
    /// The headings above it, outermost first.
    #[serde(default)]
    pub heading_path: Vec<String>,
    /// The pages of a PDF and the document's source, when it has them.
    #[serde(flatten)]
    pub provenance: Provenance,
    /// The rankers that found it, each with its rank (1 is best) and own score.
    #[serde(default)]
    pub rankers: Vec<RankerHit>,
    /// Its score against the question when analysis kept it (`research::ranking`: fused
    /// ranks of the retrieval and of BM25 against the question); none before ranking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_score: Option<f64>,
}

impl Passage {
    /// Its stored text (the snippet, for evidence written before passages).
    pub fn stored_text(&self) -> &str {
        if self.text.is_empty() { &self.snippet } else { &self.text }
    }

    /// Its readable text ([`crate::research::readable`]): what a model is shown, an
    /// extractive answer quotes and an answer is checked against.
    pub fn readable_text(&self) -> String {
        crate::research::readable::readable(self.stored_text()).text
    }

    /// Its labels: its document's title and the headings above it, which an answer's
    /// sentence must not merely repeat.
    pub fn labels(&self) -> impl Iterator<Item = String> + '_ {
        std::iter::once(self.title.clone()).chain(self.heading_path.iter().cloned())
    }
}

impl crate::research::ranking::Ranked for Passage {
    fn readable_text(&self) -> String {
        Passage::readable_text(self)
    }
    fn question_score(&self) -> Option<f64> {
        self.question_score
    }
    fn scored(self, score: f64) -> Self {
        Self { question_score: Some(score), ..self }
    }
}

impl From<Found> for Passage {
    fn from(found: Found) -> Self {
        Self {
            document_id: found.document_id,
            title: found.title,
            snippet: found.text.clone(),
            score: found.score,
            passage_id: Some(found.passage_id),
            text: found.text,
            char_start: Some(found.char_start),
            char_end: Some(found.char_end),
            heading_path: found.heading_path,
            provenance: found.provenance,
            rankers: found.rankers,
            question_score: None,
        }
    }
}

impl Passage {
    /// What deduplicates evidence: the passage, or for bundles from before passages, the
    /// document.
    pub(crate) fn identity(&self) -> Uuid {
        self.passage_id.unwrap_or(self.document_id)
    }

    /// Whether two passages of one document cover mostly the same characters (overlapping
    /// windows of one long block).
    pub(crate) fn overlaps(&self, other: &Passage) -> bool {
        let (Some(a0), Some(a1), Some(b0), Some(b1)) =
            (self.char_start, self.char_end, other.char_start, other.char_end)
        else {
            return false;
        };
        let shared = (a1.min(b1) - a0.max(b0)).max(0);
        self.document_id == other.document_id && shared * 2 > (a1 - a0).min(b1 - b0)
    }
}

/// The passages retrieval found for one sub-query.
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
    /// The evidence cited, in citation order: `evidence[0]` is `[1]`.
    pub evidence: Vec<Passage>,
    /// Each citation mark of the answer with its sentence, verdict and quote (empty when
    /// the engine checked nothing); `n` names `evidence[n - 1]`.
    #[serde(default)]
    pub citations: Vec<AnswerCitation>,
}

impl Answer {
    /// An answer over `evidence` that cites `cited` (0-based indexes, in the order of the
    /// numbers the text shows), as a [`Composer`] reports them, with no citations recorded.
    pub fn cited(text: String, evidence: &[Passage], cited: &[usize]) -> Self {
        let evidence = cited.iter().filter_map(|&index| evidence.get(index).cloned()).collect();
        Self { text, evidence, citations: Vec::new() }
    }

    /// [`Answer::cited`] with the checked sentences' citations and quotes.
    pub fn checked(text: String, evidence: &[Passage], cited: &[usize], sentences: &[CitedSentence]) -> Self {
        let stored: Vec<&str> = evidence.iter().map(Passage::stored_text).collect();
        let citations = answer_citations(sentences, cited, &stored);
        Self { citations, ..Self::cited(text, evidence, cited) }
    }
}

/// What generation answers when no passage matched the question.
pub const NO_EVIDENCE_ANSWER: &str = "No document in this knowledge space matches the question.";

/// Why a stage failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A limit in the task's `limits` was passed; retrying cannot help.
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// The next call could cost more than what is left of `budget_usd`: refused before
    /// anything was spent.
    #[error("budget exceeded: {0}")]
    OverBudget(String),
    /// The model endpoint refused the request (400, 401, 403, 404, a prompt too long for
    /// the model): the same request fails again. The message says which call and the
    /// status, error type and code, never the provider's words.
    #[error("the model endpoint refused the request: {0}")]
    Refused(String),
    /// Something that may work next time (a database hiccup, a remote model's 503).
    #[error(transparent)]
    Transient(BoxError),
    /// What an earlier stage committed cannot be read back (a row written by another
    /// version, or damaged); retrying reads the same rows, so it may work after a fix.
    #[error("the output an earlier stage committed cannot be read")]
    Stored(#[source] serde_json::Error),
}

impl EngineError {
    /// Whether another attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::LimitExceeded(_) | Self::OverBudget(_) | Self::Refused(_) | Self::Stored(_))
    }
}

/// One method per pipeline stage. Engines that call a language model implement the same
/// interface; the pipeline owns leases, checkpoints and grants.
#[async_trait]
pub trait ResearchEngine: Send + Sync {
    /// Splits the question into the sub-queries retrieval runs.
    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError>;
    /// A follow-up rewritten into a standalone query from its thread's earlier turns (run
    /// at planning, before [`ResearchEngine::plan`], only for a turn with earlier turns).
    /// By default the built-in rewrite: the previous question's search terms added.
    async fn standalone(
        &self,
        ctx: &StageContext<'_>,
        thread: &crate::research::thread::ThreadView,
    ) -> Result<Staged<String>, EngineError> {
        let query = crate::research::thread::builtin_standalone(ctx.job.query.trim(), thread.turns.first());
        Ok(Staged { output: query, cost: CostReport::default(), report: serde_json::json!({ "rewriter": "builtin" }) })
    }
    /// Finds candidate passages for every sub-query.
    async fn retrieve(&self, ctx: &StageContext<'_>, plan: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError>;
    /// Deduplicates and keeps the best evidence, up to `top_k`.
    async fn analyze(&self, ctx: &StageContext<'_>, found: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError>;
    /// Writes the answer, citing the evidence.
    async fn generate(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Result<Staged<Answer>, EngineError>;
    /// After a round that may be followed by another: whether the evidence kept so far
    /// answers the question or what to search next. The default is the built-in rule
    /// ([`coverage_decision`]), which needs no model.
    async fn decide(&self, ctx: &StageContext<'_>, so_far: &RoundsSoFar<'_>) -> Result<Staged<Decision>, EngineError> {
        Ok(Staged::new(coverage_decision(&ctx.question_with_notes(), so_far), CostReport::default()))
    }
    /// Before planning, when the task allows it (`limits.clarify`): one question to ask
    /// the person when the question is too ambiguous to research, else `None`. The
    /// default never asks (an engine without a model cannot judge).
    async fn clarify(&self, _ctx: &StageContext<'_>) -> Result<Staged<Option<String>>, EngineError> {
        Ok(Staged::new(None, CostReport::default()))
    }
    /// The most another round of `queries` sub-queries and the answer after it could
    /// spend, in nanodollars, given the evidence kept so far; 0 when the engine cannot say.
    fn next_round_cost(&self, _ctx: &StageContext<'_>, _queries: usize, _evidence: &[Passage]) -> i64 {
        0
    }
}

/// The evidence and searches of the rounds so far, as the decision after a round reads them.
#[derive(Debug, Clone, Copy)]
pub struct RoundsSoFar<'a> {
    /// The round just analysed (1 for the first).
    pub round: u32,
    /// The mode the plan resolved.
    pub mode: ResearchMode,
    /// The evidence kept by every round so far, each passage once.
    pub evidence: &'a [Passage],
    /// Every sub-query searched so far.
    pub searched: &'a [String],
    /// The most sub-queries the next round may search.
    pub cap: usize,
}

/// What the engine decided after a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The evidence answers the question.
    Answered,
    /// Search these next (the pipeline drops repeats of what was searched).
    Search(Vec<String>),
}

/// The built-in rule: the question (with its steering notes) is answered when the evidence
/// kept so far holds every content word of it (stop words aside), in its text, title or headings; otherwise the
/// next round searches each uncovered word.
pub fn coverage_decision(question: &str, so_far: &RoundsSoFar<'_>) -> Decision {
    let held: HashSet<String> = so_far
        .evidence
        .iter()
        .flat_map(|passage| {
            let mut words = search_terms(passage.stored_text());
            words.extend(search_terms(&passage.title));
            words.extend(passage.heading_path.iter().flat_map(|heading| search_terms(heading)));
            words
        })
        .collect();
    let uncovered: Vec<String> = search_terms(question).into_iter().filter(|word| !held.contains(word)).collect();
    if uncovered.is_empty() { Decision::Answered } else { Decision::Search(uncovered) }
}

/// The limits `task` runs under (parsed where they entered; see [`TaskLimits`]).
pub fn limits_of(task: &job::Model) -> TaskLimits {
    TaskLimits::from_stored(&task.limits)
}

/// The built-in engine: no language model, so a re-run over the same passages
/// recomputes the same output. It retrieves through the stage's [`PassageSearch`] (full
/// text, or hybrid with an embeddings endpoint, as the pipeline configures it).
#[derive(Debug, Clone, Default)]
pub struct BuiltinEngine {
    settings: EngineSettings,
    reranker: Option<Reranker>,
}

impl BuiltinEngine {
    /// What an answer is written from: the best of every round's evidence against the
    /// question (`research::ranking`), best first.
    pub(crate) fn answer_evidence(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Vec<Passage> {
        let top_k = ctx.job.top_k.and_then(|k| usize::try_from(k).ok()).unwrap_or(self.settings.default_top_k);
        crate::research::ranking::best_evidence(&ctx.question_with_notes(), evidence, top_k)
    }

    /// An engine with these prices and defaults.
    pub fn new(settings: EngineSettings) -> Self {
        Self { settings, reranker: None }
    }

    /// The reranker, when one is configured.
    pub(crate) fn reranker(&self) -> Option<&Reranker> {
        self.reranker.as_ref()
    }

    /// The same engine, putting each sub-query's candidates through `reranker` (when
    /// `Some`).
    pub fn reranking_with(self, reranker: Option<Reranker>) -> Self {
        Self { reranker, ..self }
    }

    /// Searches each of the plan's sub-queries (their candidates reranked when a reranker
    /// is configured); returns what reranking spent and, when it ran, its record
    /// (`{"rerank": …}`) for the stage's event.
    pub(crate) async fn search_plan(
        &self,
        ctx: &StageContext<'_>,
        plan: &Plan,
    ) -> Result<(Vec<Retrieval>, CostReport, serde_json::Value), EngineError> {
        let limit = self.settings.candidates_per_sub_query;
        let all = ctx.passages.search(ctx.job, &plan.sub_queries, limit).await.map_err(EngineError::Transient)?;
        let mut found = Vec::with_capacity(plan.sub_queries.len());
        let mut reranking = self.reranker.as_ref().map(|reranker| Reranking::new(reranker, ctx));
        for (sub_query, hits) in plan.sub_queries.iter().zip(all) {
            let mut passages: Vec<Passage> = hits.into_iter().map(Passage::from).collect();
            if let Some(reranking) = &mut reranking {
                reranking.rerank(sub_query, &mut passages).await;
            }
            found.push(Retrieval { sub_query: sub_query.clone(), passages });
        }
        Ok(match reranking {
            Some(reranking) => {
                let (cost, report) = reranking.finish();
                (found, cost, serde_json::json!({ "rerank": report }))
            }
            None => (found, CostReport::default(), serde_json::Value::Null),
        })
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

#[async_trait]
impl ResearchEngine for BuiltinEngine {
    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError> {
        let query = ctx.question();
        let mode = resolve_mode(ctx.job.mode.unwrap_or(ResearchMode::Auto), query);
        let sub_queries = split_query(query, sub_query_count(mode));
        if let Some(max) = limits_of(ctx.job).max_sub_queries.map(|max| max.get() as usize)
            && sub_queries.len() > max
        {
            return Err(EngineError::LimitExceeded(format!(
                "the {} plan needs {} sub-queries but limits.max_sub_queries is {max}",
                mode.as_str(),
                sub_queries.len()
            )));
        }
        let cost = self.cost(query, &sub_queries.join("\n"));
        Ok(Staged::new(Plan { mode, sub_queries }, cost))
    }

    async fn retrieve(&self, ctx: &StageContext<'_>, plan: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError> {
        let (found, reranked, report) = self.search_plan(ctx, plan).await?;
        let read: String = found.iter().flat_map(|r| &r.passages).map(|p| p.snippet.as_str()).collect();
        let mut cost = self.cost(&plan.sub_queries.join("\n"), &read);
        cost.usd_nanos += reranked.usd_nanos;
        Ok(Staged { output: found, cost, report })
    }

    async fn analyze(&self, ctx: &StageContext<'_>, found: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError> {
        let top_k = ctx.job.top_k.and_then(|k| usize::try_from(k).ok()).unwrap_or(self.settings.default_top_k);
        if let Some(max) = limits_of(ctx.job).max_evidence.map(|max| max.get() as usize)
            && top_k > max
        {
            return Err(EngineError::LimitExceeded(format!(
                "top_k {top_k} asks for more evidence than limits.max_evidence {max}"
            )));
        }
        let mut best: HashMap<Uuid, Passage> = HashMap::new();
        for passage in found.iter().flat_map(|retrieval| &retrieval.passages) {
            let keep = best.get(&passage.identity()).is_none_or(|kept| passage.score > kept.score);
            if keep {
                best.insert(passage.identity(), passage.clone());
            }
        }
        let mut ranked: Vec<Passage> = best.into_values().collect();
        // Ties broken by id so a re-run keeps exactly the same evidence.
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.identity().cmp(&b.identity())));
        // Ranked against the question itself too, not only the sub-query that found each.
        let ranked = crate::research::ranking::rank_candidates(&ctx.question_with_notes(), ranked);
        // A window that mostly repeats a better one adds nothing.
        let mut evidence: Vec<Passage> = Vec::with_capacity(top_k);
        for passage in ranked {
            if evidence.len() == top_k {
                break;
            }
            if !evidence.iter().any(|kept| kept.overlaps(&passage)) {
                evidence.push(passage);
            }
        }
        let read: String = found.iter().flat_map(|r| &r.passages).map(|p| p.snippet.as_str()).collect();
        let kept: String = evidence.iter().map(|p| p.snippet.as_str()).collect();
        Ok(Staged::new(evidence, self.cost(&read, &kept)))
    }

    async fn generate(&self, ctx: &StageContext<'_>, evidence: &[Passage]) -> Result<Staged<Answer>, EngineError> {
        let evidence = &self.answer_evidence(ctx, evidence);
        let question = ctx.question_with_notes();
        let readable: Vec<String> = evidence.iter().map(Passage::readable_text).collect();
        let lead = crate::research::lead::lead_sentence(self.reranker(), &question, &readable, ctx.spend()).await;
        let extracted = grounded_extractive(&question, evidence, lead.sentence);
        // Through the same checks as a model's answer, streamed in one delta.
        let mut composer = Composer::new(ctx.answer, extracted.answer.evidence.len());
        composer.push(&extracted.answer.text);
        let composed = composer.finish();
        let read: String = evidence.iter().map(|p| p.snippet.as_str()).collect();
        let mut cost = self.cost(&format!("{}{read}", ctx.job.query), &composed.text);
        cost.usd_nanos = cost.usd_nanos.saturating_add(lead.cost.usd_nanos);
        // The extract is numbered in order of first citation already: the writer keeps it.
        let answer = Answer { text: composed.text, ..extracted.answer };
        let mut report = serde_json::json!({ "citation_checks": extracted.checks });
        if !lead.report.is_null() {
            report["lead"] = lead.report;
        }
        Ok(Staged { output: answer, cost, report })
    }

    fn next_round_cost(&self, ctx: &StageContext<'_>, queries: usize, evidence: &[Passage]) -> i64 {
        let usd = |tokens_in: i64, tokens_out: i64| {
            CostReport::at_prices(
                tokens_in,
                tokens_out,
                self.settings.input_usd_per_1k_tokens * 1_000.0,
                self.settings.output_usd_per_1k_tokens * 1_000.0,
            )
            .usd_nanos
        };
        let bounds = RoundBounds::of(self, ctx, queries, evidence);
        // Retrieval reads every candidate; analysis reads them again and writes what it
        // keeps; the answer reads the evidence and the question and writes a clause of each.
        let round = usd(bounds.candidates * bounds.passage_tokens, bounds.candidates * bounds.passage_tokens)
            + usd(bounds.candidates * bounds.passage_tokens, bounds.top_k * bounds.passage_tokens);
        let answer = usd(
            bounds.evidence_after * bounds.passage_tokens + estimate_tokens(&ctx.job.query),
            bounds.evidence_after * bounds.passage_tokens,
        );
        round + answer + bounds.rerank_nanos
    }
}

/// What bounds another round's spend, as far as the rounds so far show it: every
/// candidate as long as the longest passage kept yet (256 tokens before any).
pub(crate) struct RoundBounds {
    /// Candidates the round may read: a list per ranker for every sub-query.
    pub candidates: i64,
    /// The evidence the round may keep.
    pub top_k: i64,
    /// The evidence the answer may read after it.
    pub evidence_after: i64,
    /// The longest passage, in tokens.
    pub passage_tokens: i64,
    /// What reranking every sub-query may cost.
    pub rerank_nanos: i64,
}

impl RoundBounds {
    pub(crate) fn of(engine: &BuiltinEngine, ctx: &StageContext<'_>, queries: usize, evidence: &[Passage]) -> Self {
        let queries = i64::try_from(queries).unwrap_or(i64::MAX);
        let rankers = ctx.passages.rankers();
        let per_query = i64::try_from(engine.settings.candidates_per_sub_query).unwrap_or(i64::MAX);
        let top_k = ctx.job.top_k.map_or(engine.settings.default_top_k as i64, i64::from);
        let passage_tokens = evidence.iter().map(|passage| estimate_tokens(&passage.text)).max().unwrap_or(256).max(1);
        let rerank_nanos = engine.reranker.as_ref().map_or(0, |reranker| reranker.usd_nanos_per_search() * queries);
        Self {
            candidates: queries.saturating_mul(per_query).saturating_mul(rankers),
            top_k,
            evidence_after: evidence.len() as i64 + top_k,
            passage_tokens,
            rerank_nanos,
        }
    }
}

/// The extractive answer over `evidence` through the citation check like any answer (a
/// clause that states nothing or repeats another goes; `lead`, when a reranker chose it,
/// is the sentence it must hold): the answer (its evidence in
/// citation order, its citations and quotes) and the verdicts.
pub(crate) struct Extracted {
    pub(crate) answer: Answer,
    pub(crate) checks: Vec<crate::research::grounding::Check>,
}

pub(crate) fn grounded_extractive(query: &str, evidence: &[Passage], lead: Option<(usize, String)>) -> Extracted {
    if evidence.is_empty() {
        let answer = Answer { text: NO_EVIDENCE_ANSWER.to_owned(), evidence: Vec::new(), citations: Vec::new() };
        return Extracted { answer, checks: Vec::new() };
    }
    let written = extractive(query, evidence);
    let readable: Vec<String> = evidence.iter().map(Passage::readable_text).collect();
    let texts: Vec<&str> = readable.iter().map(String::as_str).collect();
    let every: Vec<usize> = (0..evidence.len()).collect();
    let labels: Vec<String> = evidence.iter().flat_map(Passage::labels).collect();
    let sources = crate::research::grounding::Sources { texts: &texts, labels: &labels, question: query };
    let aids = crate::research::grounding::Aids { lead, ..Default::default() };
    match crate::research::grounding::ground_with(&written, &sources, &every, &aids) {
        Some(grounded) => Extracted {
            answer: Answer::checked(grounded.text, evidence, &grounded.cited, &grounded.sentences),
            checks: grounded.checks,
        },
        // Every clause stated nothing: the answer is what it is, cited by construction.
        None => Extracted { answer: Answer::cited(written, evidence, &every), checks: Vec::new() },
    }
}

/// The extractive answer over `evidence`: each item's sentence that best matches the
/// question, cited as `[n]` for the n-th item (so every item is cited, in order) and
/// ended by its full stop after the mark ("Tides follow the moon [1]. Spring tides …").
pub(crate) fn extractive(query: &str, evidence: &[Passage]) -> String {
    let terms = search_terms(query);
    let cited: Vec<String> = evidence
        .iter()
        .enumerate()
        .map(|(index, passage)| {
            let sentence = best_sentence(&passage.readable_text(), &terms);
            let (prose, end) = match sentence.char_indices().last() {
                Some((at, end @ ('.' | '!' | '?'))) => (sentence[..at].trim_end(), end),
                _ => (sentence.as_str(), '.'),
            };
            format!("{prose} [{}]{end}", index + 1)
        })
        .collect();
    cited.join(" ")
}

/// `auto` picks by the question's length: short questions need one pass, long ones more.
pub(crate) fn resolve_mode(mode: ResearchMode, query: &str) -> ResearchMode {
    if mode != ResearchMode::Auto {
        return mode;
    }
    match query.split_whitespace().count() {
        0..=6 => ResearchMode::Fast,
        7..=16 => ResearchMode::Research,
        _ => ResearchMode::Deep,
    }
}

pub(crate) fn sub_query_count(mode: ResearchMode) -> usize {
    match mode {
        ResearchMode::Fast | ResearchMode::Auto => 1,
        ResearchMode::Research => 3,
        ResearchMode::Deep => 6,
    }
}

/// The whole question first, then its clauses, then pairs of its key terms, deduplicated,
/// up to `count`.
pub(crate) fn split_query(query: &str, count: usize) -> Vec<String> {
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

/// The sentence of a passage that shares the most terms with the question (the first
/// of equals), as the extractive answer's clause.
fn best_sentence(text: &str, terms: &[String]) -> String {
    let matches = |sentence: &str| {
        let words = search_terms(sentence);
        terms.iter().filter(|term| words.contains(term)).count()
    };
    let mut best = ("", 0);
    // A line break ends a sentence too: blocks of a passage (a heading, a quote, a list
    // item) are joined by one and often end without a full stop.
    for sentence in text.lines().flat_map(|line| line.unicode_sentences()) {
        let count = matches(sentence);
        if best.0.is_empty() || count > best.1 {
            best = (sentence, count);
        }
    }
    best.0.trim().to_owned()
}

/// One retrieval's reranking: each sub-query's candidates go through the endpoint while
/// the budget and the deadline allow; a request that fails leaves its candidates in fused
/// order. Each search is recorded (`reranked`, `failed` with the error's description, or
/// `skipped` with `budget` or `deadline`) and each successful one charged.
struct Reranking<'a> {
    reranker: &'a Reranker,
    /// What the task may still spend, when it has a budget.
    budget_left: Option<i64>,
    /// `limits.deadline_ms` as a time, when set.
    deadline: Option<i64>,
    spent: i64,
    searches: Vec<serde_json::Value>,
}

impl<'a> Reranking<'a> {
    fn new(reranker: &'a Reranker, ctx: &StageContext<'_>) -> Self {
        let deadline = limits_of(ctx.job).deadline_ms.map(|ms| ctx.job.created_at.saturating_add(ms.get()));
        Self { reranker, budget_left: ctx.budget_left_nanos(), deadline, spent: 0, searches: Vec::new() }
    }

    async fn rerank(&mut self, sub_query: &str, passages: &mut Vec<Passage>) {
        use serde_json::json;
        if passages.is_empty() {
            return;
        }
        let price = self.reranker.usd_nanos_per_search();
        let left = self.budget_left.map(|left| left.saturating_sub(self.spent));
        if let Some(reason) = self.reranker.refusal(left, self.deadline, entity::now_millis()) {
            self.searches.push(json!({ "sub_query": sub_query, "outcome": "skipped", "reason": reason }));
            return;
        }
        let documents: Vec<String> = passages.iter().map(Passage::readable_text).collect();
        match self.reranker.rerank(sub_query, &documents).await {
            Ok(order) => {
                self.spent = self.spent.saturating_add(price);
                reorder(passages, &order);
                self.searches
                    .push(json!({ "sub_query": sub_query, "outcome": "reranked", "candidates": documents.len() }));
            }
            Err(error) => {
                tracing::warn!(error = %error, "reranking failed; keeping the fused order");
                let failed = json!({ "sub_query": sub_query, "outcome": "failed", "error": error.to_string() });
                self.searches.push(failed);
            }
        }
    }

    /// What reranking spent, and its record.
    fn finish(self) -> (CostReport, serde_json::Value) {
        let report = serde_json::json!({ "model": self.reranker.model(), "searches": self.searches });
        (CostReport { usd_nanos: self.spent, ..CostReport::default() }, report)
    }
}

/// Puts `passages` in the reranker's order, each scored by it with a `rerank` entry among
/// its rankers. Candidates the endpoint left out (one that caps `top_n`) follow, in fused
/// order, scored below every ranked one.
fn reorder(passages: &mut Vec<Passage>, order: &[crate::research::rerank::Ranked]) {
    let mut slots: Vec<Option<Passage>> = passages.drain(..).map(Some).collect();
    for (position, ranked) in order.iter().enumerate() {
        if let Some(mut passage) = slots.get_mut(ranked.index).and_then(Option::take) {
            passage.score = ranked.score;
            passage.rankers.push(RankerHit { ranker: Ranker::Rerank, rank: position + 1, score: ranked.score });
            passages.push(passage);
        }
    }
    let floor = passages.iter().map(|passage| passage.score).fold(f64::INFINITY, f64::min);
    let floor = if floor.is_finite() { floor } else { 0.0 };
    for (behind, mut passage) in slots.into_iter().flatten().enumerate() {
        passage.score = floor - 1.0 - behind as f64;
        passages.push(passage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passage(text: &str) -> Passage {
        Passage {
            document_id: uuid::Uuid::nil(),
            title: "Bees".into(),
            snippet: text.into(),
            score: 1.0,
            passage_id: None,
            text: text.into(),
            char_start: None,
            char_end: None,
            heading_path: vec!["Hive".into()],
            provenance: Provenance::default(),
            rankers: Vec::new(),
            question_score: None,
        }
    }

    #[test]
    fn the_question_is_answered_when_the_evidence_holds_every_content_word() {
        let evidence = [passage("Nectar becomes honey in the comb.")];
        let so_far = RoundsSoFar { round: 1, mode: ResearchMode::Deep, evidence: &evidence, searched: &[], cap: 6 };
        // "bees" from the title, "hive" from the heading, the rest from the text.
        assert_eq!(
            coverage_decision("How do the bees of a hive make honey from nectar?", &so_far),
            Decision::Search(vec!["make".into()])
        );
        assert_eq!(coverage_decision("Where is honey in the hive?", &so_far), Decision::Answered);
    }

    #[test]
    fn the_extractive_answer_keeps_a_full_stop_after_each_citation() {
        let evidence = [
            passage("Tides are caused by the moon and the sun."),
            passage("The highest tides come after a full moon"),
            passage("Do tides ever stop?"),
        ];
        assert_eq!(
            extractive("What causes tides?", &evidence),
            "Tides are caused by the moon and the sun [1]. The highest tides come after a full moon [2]. Do tides ever stop [3]?"
        );
        // The grounded answer keeps them too.
        let grounded = grounded_extractive("What causes tides?", &evidence[..2], None).answer.text;
        assert_eq!(
            grounded,
            "Tides are caused by the moon and the sun [1]. The highest tides come after a full moon [2]."
        );
    }

    #[test]
    fn modes_split_into_more_sub_queries_the_deeper_they_go() {
        let query = "How do leases fence stale workers, and why does retry backoff use jitter?";
        assert_eq!(split_query(query, sub_query_count(ResearchMode::Fast)).len(), 1);
        let research = split_query(query, sub_query_count(ResearchMode::Research));
        assert_eq!(research[0], query);
        assert!(research.len() > 1 && research.len() <= 3);
        assert!(split_query(query, sub_query_count(ResearchMode::Deep)).len() > research.len());
    }
}
