//! The retrieval evaluation: a corpus of realistic documents (`tests/data/retrieval.json`,
//! two unrelated collections with near-duplicates and distractors) and questions, each with
//! the exact text that answers it. Three ways of retrieving are scored on it:
//!
//! - **whole document**, as retrieval worked before passages: documents ranked whole by
//!   full-text search, each shown as the 240 characters around the first matching term;
//! - **passages, full text**: today's passages ranked by full-text search;
//! - **hybrid**: passages ranked by full text and by vector, fused (with the deterministic
//!   stand-in embedding endpoint of [`crate::embedding_server`]).
//!
//! A result answers a question when it comes from an answering document and its range
//! (the passage, or the whole-document snippet) covers at least half of the answer's
//! text. Recall@5 is the share of questions answered within the first five results; MRR
//! the mean of 1/rank of the first answering result within ten (0 when none).
use std::collections::HashMap;

use entity::{MediaType, knowledge_passage as passage};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter};
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;
use worker::knowledge::index::Indexing;
use worker::knowledge::retrieve::Retriever;
use worker::knowledge::search::{self, Scope};

use crate::{TestDb, fixtures};

/// How many results each question's ranking is judged over.
const RANKED: u64 = 10;

/// The evaluation corpus.
#[derive(Debug, Deserialize)]
pub struct Corpus {
    /// The documents.
    pub documents: Vec<CorpusDocument>,
    /// The questions.
    pub questions: Vec<Question>,
}

/// One document of the corpus.
#[derive(Debug, Deserialize)]
pub struct CorpusDocument {
    /// Its key, which answers name.
    pub key: String,
    /// Its title.
    pub title: String,
    /// `text/plain`, `text/markdown` or `text/html`.
    pub media_type: MediaType,
    /// Its content.
    pub content: String,
}

/// A question and where it is answered.
#[derive(Debug, Deserialize)]
pub struct Question {
    /// The question as a user would ask it.
    pub query: String,
    /// The texts that answer it.
    pub answers: Vec<Answer>,
}

/// An answering text: an exact substring of one document's content.
#[derive(Debug, Deserialize)]
pub struct Answer {
    /// The document's key.
    pub document: String,
    /// The answering text.
    pub contains: String,
}

/// Reads the corpus checked in with the tests.
pub fn corpus() -> anyhow::Result<Corpus> {
    Ok(serde_json::from_str(include_str!("../data/retrieval.json"))?)
}

/// The corpus loaded into a space of its own.
pub struct Loaded {
    /// The space's tenant.
    pub tenant_id: String,
    /// The space.
    pub space_id: Uuid,
    /// Each stored document's key.
    keys: HashMap<Uuid, String>,
}

impl Loaded {
    /// Where to search.
    pub fn scope(&self) -> Scope<'_> {
        Scope::space(&self.tenant_id, self.space_id)
    }
}

/// Scores of one way of retrieving.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metrics {
    /// Questions scored.
    pub questions: usize,
    /// Share answered within the first five results.
    pub recall_at_5: f64,
    /// Mean reciprocal rank of the first answering result, within ten.
    pub mrr: f64,
    /// Share with an answering document among the first five results, whether or not the
    /// result shows the answer: how well documents are found, as against answers.
    pub document_recall_at_5: f64,
}

impl std::fmt::Display for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "recall@5 {:.3}  MRR {:.3}  document recall@5 {:.3}  ({} questions)",
            self.recall_at_5, self.mrr, self.document_recall_at_5, self.questions
        )
    }
}

/// Adds every document to a new space, split into passages as the API does it.
pub async fn load(db: &TestDb, corpus: &Corpus, indexing: Indexing) -> anyhow::Result<Loaded> {
    let space = fixtures::space(db).await?;
    let mut keys = HashMap::new();
    for document in &corpus.documents {
        let new = worker::store::documents::NewDocument {
            tenant_id: space.tenant_id.clone(),
            knowledge_space_id: space.id,
            title: document.title.clone(),
            content: document.content.clone(),
            media_type: document.media_type,
            source_uri: None,
            metadata: json!({ "key": document.key }),
            created_by: "evaluation".to_owned(),
            indexing_status: worker::knowledge::index::initial_status(indexing.embeddings_on),
        };
        let stored = fixtures::add_document(db, new, indexing).await?;
        keys.insert(stored.id, document.key.clone());
    }
    Ok(Loaded { tenant_id: space.tenant_id, space_id: space.id, keys })
}

/// [`load`], with each document's passages replaced by one passage holding the whole
/// content: full-text search then ranks whole documents, as before passages.
pub async fn load_whole(db: &TestDb, corpus: &Corpus) -> anyhow::Result<Loaded> {
    let loaded = load(db, corpus, Indexing { chunk: Default::default(), embeddings_on: false }).await?;
    let by_key: HashMap<&str, &CorpusDocument> = corpus.documents.iter().map(|d| (d.key.as_str(), d)).collect();
    for (id, key) in &loaded.keys {
        let document = by_key[key.as_str()];
        passage::Entity::delete_many().filter(passage::Column::DocumentId.eq(*id)).exec(&db.db).await?;
        let whole = passage::ActiveModel {
            id: Set(Uuid::now_v7()),
            tenant_id: Set(loaded.tenant_id.clone()),
            knowledge_space_id: Set(loaded.space_id),
            document_id: Set(*id),
            document_revision: Set(1),
            ordinal: Set(0),
            char_start: Set(0),
            char_end: Set(i32::try_from(document.content.chars().count())?),
            heading_path: Set(json!([])),
            context: Set(document.title.clone()),
            text: Set(document.content.clone()),
            token_count: Set(0),
            created_at: Set(entity::now_millis()),
            page_start: Set(None),
            page_end: Set(None),
            source_map: Set(None),
        };
        passage::Entity::insert(whole).exec_without_returning(&db.db).await?;
    }
    Ok(loaded)
}

/// A ranked result: its document and the characters it shows.
type Shown = (Uuid, usize, usize);

/// Scores rankings: `rank(question)` gives each question's results, best first.
async fn score(
    corpus: &Corpus,
    loaded: &Loaded,
    mut rank: impl AsyncFnMut(&Question) -> anyhow::Result<Vec<Shown>>,
) -> anyhow::Result<Metrics> {
    let contents: HashMap<&str, &str> = corpus.documents.iter().map(|d| (d.key.as_str(), d.content.as_str())).collect();
    let (mut answered_in_5, mut reciprocal, mut documents_in_5) = (0usize, 0.0f64, 0usize);
    for question in &corpus.questions {
        let targets: Vec<(&str, usize, usize)> = question
            .answers
            .iter()
            .filter_map(|answer| {
                let content = contents.get(answer.document.as_str())?;
                let byte = content.find(&answer.contains)?;
                let start = content[..byte].chars().count();
                Some((answer.document.as_str(), start, start + answer.contains.chars().count()))
            })
            .collect();
        anyhow::ensure!(
            targets.len() == question.answers.len(),
            "an answer of {:?} is not in its document",
            question.query
        );
        let shown = rank(question).await?;
        if let Some((stranger, _, _)) = shown.iter().find(|(document, _, _)| !loaded.keys.contains_key(document)) {
            anyhow::bail!("{:?} retrieved document {stranger}, which is not in the searched space", question.query);
        }
        let first = shown.iter().position(|(document, start, end)| {
            let key = loaded.keys.get(document).map(String::as_str);
            targets.iter().any(|(target, answer_start, answer_end)| {
                let covered = (*end).min(*answer_end).saturating_sub((*start).max(*answer_start));
                key == Some(*target) && covered * 2 >= answer_end - answer_start
            })
        });
        let answering_document = shown.iter().take(5).any(|(document, _, _)| {
            let key = loaded.keys.get(document).map(String::as_str);
            targets.iter().any(|(target, _, _)| key == Some(*target))
        });
        documents_in_5 += usize::from(answering_document);
        if let Some(index) = first {
            answered_in_5 += usize::from(index < 5);
            reciprocal += 1.0 / (index + 1) as f64;
        }
    }
    let questions = corpus.questions.len();
    let share = |count: usize| count as f64 / questions as f64;
    Ok(Metrics {
        questions,
        recall_at_5: share(answered_in_5),
        mrr: reciprocal / questions as f64,
        document_recall_at_5: share(documents_in_5),
    })
}

/// Passages ranked by `retriever`.
pub async fn passages(db: &TestDb, corpus: &Corpus, loaded: &Loaded, retriever: &Retriever) -> anyhow::Result<Metrics> {
    score(corpus, loaded, async |question: &Question| {
        let found = retriever.search(&db.db, loaded.scope(), &question.query, RANKED).await?;
        Ok(found.into_iter().map(|hit| (hit.document_id, to_usize(hit.char_start), to_usize(hit.char_end))).collect())
    })
    .await
}

/// Whole documents ranked by full text, each shown as its old 240-character snippet.
pub async fn whole_documents(db: &TestDb, corpus: &Corpus, loaded: &Loaded) -> anyhow::Result<Metrics> {
    score(corpus, loaded, async |question: &Question| {
        let terms = search::search_terms(&question.query);
        let found = search::full_text(&db.db, loaded.scope(), &terms, RANKED).await?;
        Ok(found
            .into_iter()
            .map(|hit| {
                let (start, end) = old_snippet(&hit.text, &terms);
                (hit.document_id, start, end)
            })
            .collect())
    })
    .await
}

fn to_usize(value: i32) -> usize {
    usize::try_from(value).unwrap_or_default()
}

/// The code-point range of the snippet retrieval showed before passages: 240 characters
/// from shortly before the first matching term (back to a sentence start if one is near).
fn old_snippet(content: &str, terms: &[String]) -> (usize, usize) {
    const WIDTH: usize = 240;
    let lower = content.to_lowercase();
    let hit = terms.iter().filter_map(|term| lower.find(term.as_str())).min().unwrap_or(0);
    let mut start = hit.saturating_sub(WIDTH / 3).min(content.len());
    while !content.is_char_boundary(start) {
        start -= 1;
    }
    if let Some(stop) = content[..start].rfind(['.', '\n'])
        && start - stop < WIDTH / 3
    {
        start = stop + 1;
    }
    start += content[start..].len() - content[start..].trim_start().len();
    let first = content[..start].chars().count();
    let shown = content[start..].chars().take(WIDTH).count();
    (first, first + shown)
}
