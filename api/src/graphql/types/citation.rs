//! `AnswerTrace.citations`: each citation of a final answer, typed, with the evidence it
//! names and the quote that supports it (`worker::research::citations`).
use async_graphql::{Enum, SimpleObject};
use serde_json::Value;
use uuid::Uuid;
use worker::knowledge::search::Ranker;
use worker::research::citations::{CitationRecord, QuoteRecord};
use worker::research::engine::Passage;
use worker::research::grounding::Verdict;

/// What the citation check found for a citation that stands in the final answer (the
/// removed ones are only in `AnswerTrace.citationChecks`).
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CitationVerdict {
    /// The cited evidence supports the sentence.
    Supported,
    /// The model cited other evidence; the citation now names the evidence that supports
    /// the sentence.
    Moved,
    /// The number named evidence that does not exist or does not support the sentence
    /// (only in `citationChecks`).
    RemovedCitation,
    /// Nothing supported the sentence (only in `citationChecks`).
    RemovedSentence,
    /// The sentence had no citation; it now cites its best support.
    Attributed,
    /// Nothing the model wrote was supported: the answer is extractive, each sentence
    /// quoted from its evidence.
    ExtractiveFallback,
    /// The evidence sentence that best answers the question, which the answer did not
    /// state, leads the answer.
    AddedFromEvidence,
}

impl From<Verdict> for CitationVerdict {
    fn from(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Supported => Self::Supported,
            Verdict::Moved => Self::Moved,
            Verdict::RemovedCitation => Self::RemovedCitation,
            Verdict::RemovedSentence => Self::RemovedSentence,
            Verdict::Attributed => Self::Attributed,
            Verdict::ExtractiveFallback => Self::ExtractiveFallback,
            Verdict::AddedFromEvidence => Self::AddedFromEvidence,
        }
    }
}

/// Which ranker found a passage.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassageRanker {
    /// The database's full-text search.
    FullText,
    /// Cosine similarity of embeddings.
    Vector,
    /// The reranking endpoint's order of the fused candidates.
    Rerank,
}

impl From<Ranker> for PassageRanker {
    fn from(ranker: Ranker) -> Self {
        match ranker {
            Ranker::FullText => Self::FullText,
            Ranker::Vector => Self::Vector,
            Ranker::Rerank => Self::Rerank,
        }
    }
}

/// A ranker's opinion of a passage.
#[derive(SimpleObject, Debug, Clone)]
pub struct RankerHit {
    pub ranker: PassageRanker,
    /// 1 for the ranker's best passage.
    pub rank: i32,
    /// The ranker's own score (`ts_rank`, negated `bm25`, cosine similarity or the
    /// reranker's relevance score).
    pub score: f64,
}

/// One evidence item of an answer trace, typed. The passage fields are null for traces
/// from before passages.
#[derive(SimpleObject, Debug, Clone)]
pub struct EvidenceItem {
    /// `[n]` in the answer.
    pub citation: i32,
    pub document_id: Uuid,
    pub title: String,
    pub passage_id: Option<Uuid>,
    /// The passage's text as research used it (kept after the document changes).
    pub text: String,
    /// Where the passage starts in the document's content (code points).
    pub char_start: Option<i32>,
    /// Where it ends (exclusive).
    pub char_end: Option<i32>,
    /// The first PDF page it comes from (1-based).
    pub page_start: Option<i32>,
    /// The last PDF page it comes from.
    pub page_end: Option<i32>,
    /// The headings above it, outermost first.
    pub heading_path: Vec<String>,
    /// Where its document came from.
    pub source_uri: Option<String>,
    /// The rankers that found it.
    pub rankers: Vec<RankerHit>,
    /// Higher is better, comparable within one task (see `AnswerTrace.evidence`).
    pub score: f64,
}

impl EvidenceItem {
    /// The `n`-th item (1-based) of a trace's evidence JSON, if it is one.
    pub fn nth(evidence: &Value, n: usize) -> Option<Self> {
        let item = evidence.as_array()?.get(n.checked_sub(1)?)?;
        let passage: Passage = serde_json::from_value(item.clone()).ok()?;
        let citation = item.get("citation").and_then(Value::as_i64).unwrap_or(n as i64);
        Some(Self {
            citation: i32::try_from(citation).unwrap_or(i32::MAX),
            document_id: passage.document_id,
            title: passage.title.clone(),
            passage_id: passage.passage_id,
            text: passage.stored_text().to_owned(),
            char_start: passage.char_start,
            char_end: passage.char_end,
            page_start: passage.provenance.page_start,
            page_end: passage.provenance.page_end,
            heading_path: passage.heading_path.clone(),
            source_uri: passage.provenance.source_uri.clone(),
            rankers: passage
                .rankers
                .iter()
                .map(|hit| RankerHit {
                    ranker: hit.ranker.into(),
                    rank: i32::try_from(hit.rank).unwrap_or(i32::MAX),
                    score: hit.score,
                })
                .collect(),
            score: passage.score,
        })
    }
}

/// The words of a passage that support a sentence, located in the document, so a viewer
/// can highlight exactly them (`KnowledgeDocument.excerpt` shows them in context).
#[derive(SimpleObject, Debug, Clone)]
pub struct Quote {
    /// The supporting sentence(s) of the passage, as the model was shown them (markup
    /// out), joined by a space.
    pub text: String,
    /// Where they start in the document's content, in code points: the smallest
    /// half-open range holding them, inside the passage's range (the passage's whole
    /// range for passages split before offset maps were recorded).
    pub char_start: i32,
    /// Where they end (exclusive).
    pub char_end: i32,
    /// The PDF page they are on, when there is one.
    pub page_start: Option<i32>,
    /// The last such page.
    pub page_end: Option<i32>,
    /// The document revision the range indexes; null when the passage is no longer
    /// stored (its document changed or went since).
    pub document_revision: Option<i32>,
}

impl From<QuoteRecord> for Quote {
    fn from(quote: QuoteRecord) -> Self {
        Self {
            text: quote.text,
            char_start: quote.char_start,
            char_end: quote.char_end,
            page_start: quote.page_start,
            page_end: quote.page_end,
            document_revision: quote.document_revision,
        }
    }
}

/// One citation mark of a final answer.
#[derive(SimpleObject, Debug, Clone)]
pub struct Citation {
    /// `[n]`: the answer's n-th evidence item.
    pub n: i32,
    /// The sentence as it stands in the final answer, citation marks included.
    pub sentence: String,
    /// Why the citation stands; null for answers from before citation checks.
    pub verdict: Option<CitationVerdict>,
    /// The evidence item it names; null only where an answer from before checks named
    /// none.
    pub evidence: Option<EvidenceItem>,
    /// The passage's words that support the sentence; null for answers from before
    /// quotes.
    pub quote: Option<Quote>,
}

impl Citation {
    /// The citation `record` of a trace whose evidence JSON is `evidence`.
    pub fn of(record: CitationRecord, evidence: &Value) -> Self {
        Self {
            n: i32::try_from(record.n).unwrap_or(i32::MAX),
            evidence: EvidenceItem::nth(evidence, record.n),
            sentence: record.sentence,
            verdict: record.verdict.map(Into::into),
            quote: record.quote.map(Into::into),
        }
    }
}
