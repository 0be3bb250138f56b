//! Ranking evidence against the question itself, in memory, so deeper modes answer no
//! worse than FAST. A later round's sub-query finds passages about its own words; what the
//! answer needs is what answers the *question*.
//!
//! - **Analysis** ranks a round's candidates by reciprocal-rank fusion (`k` = [`RRF_K`]) of
//!   two orders: the retrieval's (each passage's best score over the sub-queries that
//!   found it) and BM25 against the question ([`bm25`], over the round's candidates, each
//!   passage's readable text a document); a passage sharing no word with the question has
//!   no place in the second order. It keeps the best `topK` (a window mostly repeating a
//!   better one aside) and stores each kept passage's fused score (`question_score`) in the
//!   round's evidence bundle.
//! - **The answer** is written from the best evidence across the rounds (not the union in
//!   round order): every round's evidence ranked by fusion of the stored scores' order and
//!   BM25 against the question over all of it, the best `topK` kept, then any other item
//!   holding a word of the question that none kept holds (what a later round was run to
//!   cover), best first. Both inputs are read back from the bundles, so a resumed task ranks
//!   exactly as before.
//!
//! BM25 is [`crate::research::bm25`]'s, over the documents ranked together. Ties keep the
//! order given.
use std::collections::{HashMap, HashSet};

use crate::research::bm25::{bm25, question_stems};
use crate::research::support::Reading;

/// What ranking reads of an evidence item (the engine's `Passage`).
pub trait Ranked: Clone {
    /// Its readable text.
    fn readable_text(&self) -> String;
    /// Analysis's stored score, if any.
    fn question_score(&self) -> Option<f64>;
    /// It with analysis's score.
    fn scored(self, score: f64) -> Self;
}

/// Reciprocal-rank fusion's constant: `1 / (k + rank)`.
pub const RRF_K: f64 = 60.0;

/// A passage's readable text as BM25 reads it: its content stems, repeats kept.
fn passage_terms<P: Ranked>(passage: &P) -> Vec<String> {
    Reading::new(&passage.readable_text()).sentences_with_stems().into_iter().flat_map(|(_, stems)| stems).collect()
}

/// `passages` (in the order of the first ranking) re-ordered by fusion with BM25 against
/// `question`, each with its fused score; the stable order of equals is the first ranking's.
/// Each comes with its content stems that are the question's (read once, for the caller).
fn fused<P: Ranked>(question: &str, passages: Vec<P>) -> Vec<(f64, P, HashSet<String>)> {
    let wanted = question_stems(question);
    let terms: Vec<Vec<String>> = passages.iter().map(passage_terms).collect();
    let scores = bm25(&wanted, &terms);
    let mut by_question: Vec<usize> = (0..passages.len()).filter(|&at| scores[at] > 0.0).collect();
    by_question.sort_by(|left, right| scores[*right].total_cmp(&scores[*left]).then(left.cmp(right)));
    let mut question_rank: HashMap<usize, usize> = HashMap::new();
    for (rank, at) in by_question.into_iter().enumerate() {
        question_rank.insert(at, rank + 1);
    }
    let mut out: Vec<(f64, P, HashSet<String>)> = passages
        .into_iter()
        .zip(terms)
        .enumerate()
        .map(|(at, (passage, terms))| {
            let mut score = 1.0 / (RRF_K + (at + 1) as f64);
            if let Some(rank) = question_rank.get(&at) {
                score += 1.0 / (RRF_K + *rank as f64);
            }
            let asked = terms.into_iter().filter(|stem| wanted.contains(stem)).collect();
            (score, passage, asked)
        })
        .collect();
    out.sort_by(|left, right| right.0.total_cmp(&left.0));
    out
}

/// A round's candidates, ranked by the retrieval (best first), ranked against the question
/// too: the best first, each holding its fused score in `question_score`.
pub fn rank_candidates<P: Ranked>(question: &str, ranked: Vec<P>) -> Vec<P> {
    fused(question, ranked).into_iter().map(|(score, passage, _)| passage.scored(score)).collect()
}

/// The best of every round's evidence for `question`, best first: ordered by the stored
/// scores (analysis's, `question_score`; evidence stored before has none and follows in
/// its order), fused with BM25 against the question over all of it; the first `top_k`,
/// then each later item holding a question word none before it holds.
pub fn best_evidence<P: Ranked>(question: &str, evidence: &[P], top_k: usize) -> Vec<P> {
    if evidence.len() <= 1 {
        return evidence.to_vec();
    }
    let mut stored: Vec<P> = evidence.to_vec();
    // Stable: equal scores (and none) keep the rounds' order.
    stored.sort_by(|left, right| {
        right.question_score().unwrap_or(f64::MIN).total_cmp(&left.question_score().unwrap_or(f64::MIN))
    });
    let mut covered: HashSet<String> = HashSet::new();
    let mut best = Vec::new();
    for (rank, (_, passage, terms)) in fused(question, stored).into_iter().enumerate() {
        if rank < top_k.max(1) || !terms.is_subset(&covered) {
            covered.extend(terms);
            best.push(passage);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::research::engine::Passage;

    fn passage(text: &str) -> Passage {
        Passage { text: text.to_owned(), ..Passage::default() }
    }

    #[test]
    fn a_candidate_answering_the_question_rises_above_one_only_a_sub_query_found() {
        let ranked = vec![
            passage("Windows has named pipes and many other features for processes."),
            passage("The cluster module distributes connections round-robin on every platform but Windows."),
        ];
        let kept = rank_candidates("How does the cluster module distribute connections?", ranked);
        assert!(kept[0].text.starts_with("The cluster module"), "{kept:?}");
        assert!(kept[0].question_score > kept[1].question_score);
    }

    #[test]
    fn the_answer_reads_the_best_across_rounds_not_the_first_round_first() {
        let question = "What is the default highWaterMark?";
        let mut first = rank_candidates(question, vec![passage("Streams move data between places.")]);
        let second = rank_candidates(
            question,
            vec![passage("The default highWaterMark of a byte stream is 16384 bytes."), passage("Pipes exist.")],
        );
        first.extend(second);
        let best = best_evidence(question, &first, 1);
        assert_eq!(best.len(), 1, "the others add no word of the question: {best:?}");
        assert!(best[0].text.contains("16384"), "{best:?}");
        // Read back from bundles, the same evidence ranks the same.
        let stored = serde_json::to_value(&first).expect("serializes");
        let read: Vec<Passage> = serde_json::from_value(stored).expect("reads back");
        assert_eq!(best_evidence(question, &read, 1), best);
        // A passage holding a question word the best lacks is kept too.
        let wider = best_evidence("default highWaterMark of pipes", &read, 1);
        assert_eq!(wider.len(), 2, "{wider:?}");
    }
}
