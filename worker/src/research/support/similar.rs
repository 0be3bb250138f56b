//! The meaning fallback of the support check (rule 2 only): when an embeddings endpoint is
//! configured, a claim whose share of the passage's words is below
//! [`super::SUPPORT_THRESHOLD`] is still supported when the cosine similarity of its
//! embedding and the embedding of the passage sentence that best supports it is at least
//! the threshold (`KFS_EMBEDDINGS_SUPPORT_THRESHOLD`, [`DEFAULT_THRESHOLD`] by default).
//! The compared sentence is the quote's best (the one sharing most of the claim's words),
//! or, when no sentence shares a word, the most similar sentence of the passage (its first
//! [`MAX_COMPARED_SENTENCES`]). Rules 1 and 3 still hold: a number, version, identifier or
//! quoted string the passage lacks, or a denial the compared sentence does not share, is
//! never supported, however similar the texts.
//!
//! The check itself stays synchronous: [`Similarities`] holds the vectors it may use and
//! records the texts it wanted and did not have, so a caller checks once, embeds what was
//! wanted in one request and checks again (`research::grounding::ground_checked`).
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

/// The similarity a claim and a passage sentence need, by default, to count as the same
/// statement: a paraphrase scores above it with the common embedding models
/// (`text-embedding-3-small`, `nomic-embed-text`), sentences that merely share a topic
/// below.
pub const DEFAULT_THRESHOLD: f64 = crate::model_settings::DEFAULT_SUPPORT_THRESHOLD;

/// The most sentences of a passage compared with a claim that shares no word with any.
pub const MAX_COMPARED_SENTENCES: usize = 16;

/// The embeddings the check may compare, and the texts it wanted and did not have.
#[derive(Debug)]
pub struct Similarities {
    /// The cosine similarity that supports a claim; `None` when no endpoint is configured
    /// (nothing is compared and nothing wanted).
    threshold: Option<f64>,
    vectors: HashMap<String, Vec<f32>>,
    wanted: RefCell<BTreeSet<String>>,
}

impl Default for Similarities {
    fn default() -> Self {
        Self::none()
    }
}

impl Similarities {
    /// No embeddings: the check is lexical only.
    pub fn none() -> Self {
        Self { threshold: None, vectors: HashMap::new(), wanted: RefCell::default() }
    }

    /// Embeddings may be had at `threshold`: none known yet.
    pub fn at(threshold: f64) -> Self {
        Self { threshold: Some(threshold), ..Self::none() }
    }

    /// Knows `text`'s embedding.
    pub fn insert(&mut self, text: String, vector: Vec<f32>) {
        self.vectors.insert(text, vector);
    }

    /// The threshold, when embeddings take part.
    pub fn threshold(&self) -> Option<f64> {
        self.threshold
    }

    /// The texts asked for and not known, in a stable order.
    pub fn wanted(&self) -> Vec<String> {
        self.wanted.borrow().iter().cloned().collect()
    }

    /// The cosine similarity of `left` and `right` when both embeddings are known; each
    /// unknown one is recorded as wanted. `None` without embeddings.
    pub fn cosine(&self, left: &str, right: &str) -> Option<f64> {
        self.threshold?;
        let (a, b) = (self.vector(left), self.vector(right));
        cosine(a?, b?)
    }

    fn vector(&self, text: &str) -> Option<&[f32]> {
        let found = self.vectors.get(text).map(Vec::as_slice);
        if found.is_none() {
            self.wanted.borrow_mut().insert(text.to_owned());
        }
        found
    }
}

/// The cosine similarity of two vectors of one length (`None` for another length or a
/// zero vector).
fn cosine(a: &[f32], b: &[f32]) -> Option<f64> {
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let (mut dot, mut left, mut right) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        left += x * x;
        right += y * y;
    }
    (left > 0.0 && right > 0.0).then(|| dot / (left.sqrt() * right.sqrt()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_texts_are_wanted_and_known_ones_compared() {
        let mut similar = Similarities::at(0.75);
        assert_eq!(similar.cosine("a", "b"), None);
        assert_eq!(similar.wanted(), vec!["a".to_owned(), "b".to_owned()]);
        similar.insert("a".into(), vec![1.0, 0.0]);
        similar.insert("b".into(), vec![1.0, 1.0]);
        let value = similar.cosine("a", "b").expect("both known");
        assert!((value - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-9);
        assert_eq!(Similarities::none().cosine("a", "b"), None);
        assert!(Similarities::none().wanted().is_empty(), "nothing is wanted without an endpoint");
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), None);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), None);
    }
}
