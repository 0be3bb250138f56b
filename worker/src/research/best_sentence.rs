//! The evidence sentence that best answers a question, so an answer always holds it: the
//! sentences of the kept evidence (their readable text, cut as the support check cuts
//! them) ranked in memory against the question by BM25 over Snowball-stemmed content
//! words (`research::bm25`: `k1` 1.2, `b` 0.75, each sentence a document, IDF over
//! the sentences), the first of equals winning. A sentence sharing no word with the
//! question is never the best.
use crate::research::bm25::{bm25, question_stems};
use crate::research::support::Reading;

/// How many of BM25's best sentences a reranker orders.
pub const RERANKED_SENTENCES: usize = 8;

/// The best sentence for `question` among `evidence` (the readable texts, read): the
/// evidence item's index and the sentence, trimmed.
pub fn best_sentence(question: &str, evidence: &[Reading]) -> Option<(usize, String)> {
    ranked_sentences(question, evidence, 1).pop()
}

/// The best `limit` sentences for `question` among `evidence`, best first (the first of
/// equals first), each with its evidence item's index.
pub fn ranked_sentences(question: &str, evidence: &[Reading], limit: usize) -> Vec<(usize, String)> {
    let wanted = question_stems(question);
    if wanted.is_empty() {
        return Vec::new();
    }
    let mut sentences: Vec<(usize, String)> = Vec::new();
    let mut terms: Vec<Vec<String>> = Vec::new();
    for (index, reading) in evidence.iter().enumerate() {
        for (sentence, stems) in reading.sentences_with_stems() {
            if !stems.is_empty() {
                sentences.push((index, sentence));
                terms.push(stems);
            }
        }
    }
    let mut scored: Vec<(usize, f64)> =
        bm25(&wanted, &terms).into_iter().enumerate().filter(|(_, value)| *value > 0.0).collect();
    // A stable sort: equals keep their text order.
    scored.sort_by(|left, right| right.1.total_cmp(&left.1));
    scored.truncate(limit);
    let mut slots: Vec<Option<(usize, String)>> = sentences.into_iter().map(Some).collect();
    scored.into_iter().filter_map(|(at, _)| slots.get_mut(at).and_then(Option::take)).collect()
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
        let ranked = ranked_sentences("What is the default highWaterMark of a stream?", &evidence, 3);
        assert_eq!(ranked.len(), 3, "{ranked:?}");
        assert_eq!(ranked[0].1, "The default highWaterMark of a byte stream is 16384 bytes.");
    }
}
