//! The evidence sentence that best answers a question, so an answer always holds it: the
//! sentences of the kept evidence (their readable text, cut as the support check cuts
//! them) ranked in memory against the question by BM25 over Snowball-stemmed content
//! words (`k1` = [`K1`], `b` = [`B`], each sentence a document, IDF
//! `ln(1 + (N − n + 0.5) / (n + 0.5))` over the sentences), the first of equals winning.
//! A sentence sharing no word with the question is never the best.
use std::collections::{HashMap, HashSet};

use crate::research::support::Reading;

/// BM25's term-frequency saturation.
pub const K1: f64 = 1.2;
/// BM25's length normalisation.
pub const B: f64 = 0.75;

/// The best sentence for `question` among `evidence` (the readable texts, read): the
/// evidence item's index and the sentence, trimmed.
pub fn best_sentence(question: &str, evidence: &[Reading]) -> Option<(usize, String)> {
    let wanted: HashSet<String> = Reading::new(question).content_stems().iter().cloned().collect();
    if wanted.is_empty() {
        return None;
    }
    let mut sentences: Vec<(usize, String, Vec<String>)> = Vec::new();
    for (index, reading) in evidence.iter().enumerate() {
        for (sentence, stems) in reading.sentences_with_stems() {
            if !stems.is_empty() {
                sentences.push((index, sentence, stems));
            }
        }
    }
    if sentences.is_empty() {
        return None;
    }
    let count = sentences.len() as f64;
    let mean_length = sentences.iter().map(|(_, _, stems)| stems.len()).sum::<usize>() as f64 / count;
    let mut holding: HashMap<&str, usize> = HashMap::new();
    for (_, _, stems) in &sentences {
        for stem in stems.iter().collect::<HashSet<_>>() {
            if wanted.contains(stem) {
                *holding.entry(stem.as_str()).or_default() += 1;
            }
        }
    }
    let score = |stems: &[String]| -> f64 {
        let length = stems.len() as f64;
        wanted
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
    };
    let mut best: Option<(f64, usize)> = None;
    for (at, (_, _, stems)) in sentences.iter().enumerate() {
        let value = score(stems);
        if value > 0.0 && best.is_none_or(|(top, _)| value > top) {
            best = Some((value, at));
        }
    }
    best.map(|(_, at)| (sentences[at].0, sentences[at].1.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sentence_holding_the_rarest_question_words_wins() {
        let evidence = [
            "Streams move data. Every stream has a buffer.",
            "Writable streams buffer data. The default highWaterMark of a byte stream is 16384 bytes.",
        ]
        .map(Reading::new);
        let best = best_sentence("What is the default highWaterMark of a stream?", &evidence);
        assert_eq!(best, Some((1, "The default highWaterMark of a byte stream is 16384 bytes.".to_owned())));
        assert_eq!(best_sentence("bees", &evidence), None);
    }
}
