//! BM25 in memory, as research ranks evidence and sentences against a question:
//! Snowball-stemmed content words (the support check's), `k1` = [`K1`], `b` = [`B`], IDF
//! `ln(1 + (N − n + 0.5) / (n + 0.5))` over the documents ranked together.
use std::collections::{HashMap, HashSet};

use crate::research::support::Reading;

/// BM25's term-frequency saturation.
pub const K1: f64 = 1.2;
/// BM25's length normalisation.
pub const B: f64 = 0.75;
/// The BM25 score of each of `documents` (content stems, repeats kept) for the stems of
/// `question`; 0 for a document holding none of them.
pub fn bm25(question: &HashSet<String>, documents: &[Vec<String>]) -> Vec<f64> {
    if documents.is_empty() || question.is_empty() {
        return vec![0.0; documents.len()];
    }
    let count = documents.len() as f64;
    let mean_length = (documents.iter().map(Vec::len).sum::<usize>() as f64 / count).max(1.0);
    let mut holding: HashMap<&str, usize> = HashMap::new();
    for stems in documents {
        for stem in stems.iter().collect::<HashSet<_>>() {
            if question.contains(stem) {
                *holding.entry(stem.as_str()).or_default() += 1;
            }
        }
    }
    documents
        .iter()
        .map(|stems| {
            let length = stems.len() as f64;
            question
                .iter()
                .map(|term| {
                    let frequency = stems.iter().filter(|stem| *stem == term).count() as f64;
                    if frequency == 0.0 {
                        return 0.0;
                    }
                    let with = holding.get(term.as_str()).copied().unwrap_or(0) as f64;
                    let idf = (1.0 + (count - with + 0.5) / (with + 0.5)).ln();
                    idf * frequency * (K1 + 1.0) / (frequency + K1 * (1.0 - B + B * length / mean_length))
                })
                .sum()
        })
        .collect()
}

/// The content stems of `question`, each once.
pub fn question_stems(question: &str) -> HashSet<String> {
    Reading::new(question).content_stems().iter().cloned().collect()
}
