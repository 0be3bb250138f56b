//! The evidence sentence that best answers a question, so an answer always holds it: the
//! sentences of the kept evidence (their readable text, cut as the support check cuts
//! them) ranked in memory against the question by BM25 over Snowball-stemmed content
//! words (`research::bm25`: `k1` 1.2, `b` 0.75, each sentence a document, IDF over
//! the sentences), the first of equals winning. A sentence sharing no word with the
//! question is never the best.
use crate::research::bm25::{bm25, question_stems};
use crate::research::support::Reading;

/// The best sentence for `question` among `evidence` (the readable texts, read): the
/// evidence item's index and the sentence, trimmed.
pub fn best_sentence(question: &str, evidence: &[Reading]) -> Option<(usize, String)> {
    let wanted = question_stems(question);
    if wanted.is_empty() {
        return None;
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
    let mut best: Option<(f64, usize)> = None;
    for (at, value) in bm25(&wanted, &terms).into_iter().enumerate() {
        if value > 0.0 && best.is_none_or(|(top, _)| value > top) {
            best = Some((value, at));
        }
    }
    best.map(|(_, at)| sentences.swap_remove(at))
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
