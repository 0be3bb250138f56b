//! A follow-up's conversation: the earlier turns of its thread an engine may see, and the
//! standalone query the follow-up is researched as.
//!
//! The turns are bounded by `KFS_THREAD_CONTEXT_CHARS` ([`Context`]): newest first, each
//! with its question and answer while both fit, then older turns by their question alone
//! while that fits; what does not fit is left out. A follow-up is rewritten into a
//! standalone query once, at planning: the `openai` engine asks its model (one budgeted
//! call), the built-in engine adds the search terms of the previous turn's question that
//! the follow-up lacks ([`builtin_standalone`]). Every later stage plans, decides and
//! answers from that query (`StageContext::question`).
use std::sync::OnceLock;

use crate::knowledge::search::search_terms;

/// An earlier turn as an engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorTurn {
    /// Its question, as asked.
    pub question: String,
    /// Its answer, when it has one and it fits in the context.
    pub answer: Option<String>,
}

/// What a turn knows of its thread.
#[derive(Debug, Default)]
pub struct ThreadView {
    /// The earlier turns that fit, newest first.
    pub turns: Vec<PriorTurn>,
    /// The standalone query, once planning made it (or read back from planning's event).
    pub standalone: OnceLock<String>,
    /// How long the turn waited, queued, for earlier turns to end, in milliseconds: not
    /// counted against its `limits.deadline_ms`.
    pub waited_ms: i64,
}

impl ThreadView {
    /// The earlier turns and, when planning already made it, the standalone query.
    pub fn new(turns: Vec<PriorTurn>, standalone: Option<String>) -> Self {
        let view = Self { turns, standalone: OnceLock::new(), waited_ms: 0 };
        if let Some(query) = standalone {
            let _ = view.standalone.set(query);
        }
        view
    }

    /// The lines a model prompt shows of the conversation, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.turns
            .iter()
            .rev()
            .map(|turn| match &turn.answer {
                Some(answer) => {
                    format!("Earlier in this conversation they asked \"{}\"; the answer was: {}", turn.question, answer)
                }
                None => format!("Earlier in this conversation they asked \"{}\"", turn.question),
            })
            .collect()
    }
}

/// The earlier turns a follow-up sees, gathered newest first within a number of
/// characters: question and answer while both fit, then questions alone.
#[derive(Debug)]
pub struct Context {
    left: usize,
    answers_fit: bool,
    kept: Vec<PriorTurn>,
}

impl Context {
    /// Room for `chars` characters.
    pub fn new(chars: usize) -> Self {
        Self { left: chars, answers_fit: true, kept: Vec::new() }
    }

    /// Whether an answer may still be kept (past that, only questions are).
    pub fn wants_answers(&self) -> bool {
        self.answers_fit
    }

    /// Adds the next older turn; false once its question no longer fits (nothing older
    /// will be kept either).
    pub fn push(&mut self, question: String, answer: Option<String>) -> bool {
        let question_len = question.chars().count();
        if question_len > self.left {
            return false;
        }
        let answer_len = answer.as_deref().map_or(0, |answer| answer.chars().count());
        let answer = match answer {
            Some(answer) if self.answers_fit && question_len + answer_len <= self.left => Some(answer),
            _ => {
                self.answers_fit = false;
                None
            }
        };
        self.left -= question_len + answer.as_deref().map_or(0, |_| answer_len);
        self.kept.push(PriorTurn { question, answer });
        true
    }

    /// The turns kept, newest first.
    pub fn into_turns(self) -> Vec<PriorTurn> {
        self.kept
    }
}

/// The built-in engine's standalone query: the follow-up, then the search terms of the
/// previous turn's question it does not hold already (`and on Windows?` after `How does
/// the cluster module distribute connections?` is `and on Windows? cluster module
/// distribute connections`).
pub fn builtin_standalone(question: &str, previous: Option<&PriorTurn>) -> String {
    let question = question.trim();
    let Some(previous) = previous else { return question.to_owned() };
    let own: Vec<String> = search_terms(question);
    let added: Vec<String> = search_terms(&previous.question).into_iter().filter(|term| !own.contains(term)).collect();
    if added.is_empty() { question.to_owned() } else { format!("{question} {}", added.join(" ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The turns (newest first: question, answer if any) that fit in `chars` characters.
    fn bounded(turns: Vec<(String, Option<String>)>, chars: usize) -> Vec<PriorTurn> {
        let mut context = Context::new(chars);
        for (question, answer) in turns {
            if !context.push(question, answer) {
                break;
            }
        }
        context.into_turns()
    }

    #[test]
    fn newest_turns_keep_their_answers_while_they_fit_and_older_ones_their_questions() {
        let turns = vec![
            ("third?".to_owned(), Some("c".repeat(10))),
            ("second?".to_owned(), Some("b".repeat(100))),
            ("first?".to_owned(), Some("a".repeat(5))),
        ];
        let kept = bounded(turns.clone(), 40);
        assert_eq!(kept.len(), 3);
        assert_eq!(kept[0].answer.as_deref(), Some("cccccccccc"));
        assert_eq!(kept[1].answer, None, "too long: the question alone");
        assert_eq!(kept[2].answer, None, "older turns by their question only");
        assert_eq!(bounded(turns.clone(), 8).len(), 1, "only what fits");
        assert!(bounded(turns, 2).is_empty());
    }

    #[test]
    fn the_builtin_standalone_query_adds_the_previous_questions_terms() {
        let previous =
            PriorTurn { question: "How does the cluster module distribute connections?".into(), answer: None };
        let standalone = builtin_standalone("And on Windows?", Some(&previous));
        assert!(standalone.starts_with("And on Windows?"), "{standalone}");
        for term in ["cluster", "distribut", "connect"] {
            assert!(standalone.contains(term), "{standalone} lacks {term}");
        }
        assert_eq!(builtin_standalone(" Why? ", None), "Why?");
    }
}
