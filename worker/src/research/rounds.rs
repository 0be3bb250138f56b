//! Research in rounds: after each round's retrieval and analysis the engine reads what was
//! kept so far and decides whether the question is answered or what to search next
//! (`ResearchEngine::decide`; the built-in rule is `engine::coverage_decision`). This
//! module holds what the pipeline applies around that decision: how many rounds a task
//! may run, which proposed sub-queries are new, and why a loop goes on or stops (the
//! `decision` of a round's `STAGE_CHANGED` payload).
use std::collections::HashSet;

use entity::{ResearchMode, research_task_job as job};
use serde::{Deserialize, Serialize};

use crate::research::engine::limits_of;

/// Why the loop goes on after a round, or why it stops: the round payload's `decision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Another round follows.
    Continue,
    /// The engine judged the question answered.
    Answered,
    /// The decision repeated earlier sub-queries or proposed none.
    NoNewQueries,
    /// The round kept no passage that earlier rounds had not.
    NoNewEvidence,
    /// The round limit was reached (no decision was asked).
    MaxRounds,
    /// Another round and the answer after it would not fit in what is left of the budget.
    Budget,
    /// Another round and the answer after it would not fit before `limits.deadline_ms`.
    Deadline,
}

impl Outcome {
    /// Whether another round follows.
    pub fn goes_on(self) -> bool {
        self == Self::Continue
    }
}

/// The most rounds `task` may run: `limits.max_rounds`, else its resolved mode's default
/// (FAST 1, RESEARCH 2, DEEP 4).
pub fn max_rounds(task: &job::Model, mode: ResearchMode) -> u32 {
    match limits_of(task).max_rounds {
        Some(max) => u32::try_from(max.get()).unwrap_or(1),
        None => match mode {
            ResearchMode::Fast | ResearchMode::Auto => 1,
            ResearchMode::Research => 2,
            ResearchMode::Deep => 4,
        },
    }
}

/// The sub-queries of `proposed` the next round searches: trimmed, non-empty, each once,
/// none searched before (compared without case), at most `cap`.
pub fn next_queries(proposed: Vec<String>, searched: &[String], cap: usize) -> Vec<String> {
    let mut seen: HashSet<String> = searched.iter().map(|query| query.trim().to_lowercase()).collect();
    let mut next = Vec::new();
    for query in proposed {
        let query = query.trim();
        if next.len() == cap {
            break;
        }
        if !query.is_empty() && seen.insert(query.to_lowercase()) {
            next.push(query.to_owned());
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_queries_drop_repeats_blanks_and_what_was_searched() {
        let searched = ["Honey".to_owned()];
        let proposed = vec![" honey ".into(), "wax".into(), "".into(), "WAX".into(), "comb".into(), "brood".into()];
        assert_eq!(next_queries(proposed, &searched, 2), ["wax", "comb"]);
        assert!(next_queries(vec!["honey".into()], &searched, 2).is_empty());
    }
}
