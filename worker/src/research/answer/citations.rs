//! Checking citations as an answer streams: text passes through as it arrives, except what
//! might still turn out to be a citation (`[`, digits, commas) or trailing whitespace,
//! which is held back until it is decided. A citation `[n]` (or a group `[n, m]`) naming
//! evidence that exists is renumbered in order of first citation, so the answer trace's
//! evidence is exactly what the answer cites, numbered as the text numbers it; one naming
//! evidence that does not exist is removed (with the space before it) and recorded. What
//! has been released is never taken back, so it can be shown at once.

/// The longest bracketed text still considered a possible citation.
const MAX_CITATION_CHARS: usize = 32;

/// The streaming citation checker of one answer.
#[derive(Debug, Clone)]
pub struct CitationFilter {
    evidence: usize,
    /// Whitespace after the last released text, held until something follows it.
    space: String,
    /// A `[` and what followed it, while it may still be a citation.
    candidate: Option<String>,
    /// Evidence indexes (0-based) in the order the answer first cites them.
    cited: Vec<usize>,
    /// Citations removed because they named no evidence, as written.
    removed: Vec<String>,
    /// Whether anything has been released yet (leading whitespace is dropped).
    started: bool,
}

impl CitationFilter {
    /// A checker for an answer over `evidence` numbered items (`[1]`…`[evidence]`).
    pub fn new(evidence: usize) -> Self {
        Self { evidence, space: String::new(), candidate: None, cited: Vec::new(), removed: Vec::new(), started: false }
    }

    /// Takes the next piece of the model's output; returns what may be shown now.
    pub fn push(&mut self, piece: &str) -> String {
        let mut released = String::new();
        for ch in piece.chars() {
            self.take(ch, &mut released);
        }
        released
    }

    /// The output ended: releases what was held back, except trailing whitespace.
    pub fn finish(&mut self) -> String {
        let mut released = String::new();
        if let Some(candidate) = self.candidate.take() {
            self.release(&candidate, &mut released);
        }
        self.space.clear();
        released
    }

    /// The cited evidence (0-based indexes into what the answer was written over), in the
    /// order of the numbers the answer now shows: `cited()[0]` is `[1]`.
    pub fn cited(&self) -> &[usize] {
        &self.cited
    }

    /// Citations that named no evidence and were removed, as the model wrote them.
    pub fn removed(&self) -> &[String] {
        &self.removed
    }

    fn take(&mut self, ch: char, released: &mut String) {
        if let Some(candidate) = &mut self.candidate {
            if ch == ']' {
                candidate.push(ch);
                let candidate = self.candidate.take().unwrap_or_default();
                self.close(&candidate, released);
                return;
            }
            let fits = ch.is_ascii_digit() || ch == ',' || ch == ' ';
            if fits && candidate.chars().count() < MAX_CITATION_CHARS {
                candidate.push(ch);
                return;
            }
            // Not a citation after all: it is text, and `ch` is read afresh.
            let candidate = self.candidate.take().unwrap_or_default();
            self.release(&candidate, released);
            self.take(ch, released);
            return;
        }
        if ch == '[' {
            self.candidate = Some("[".to_owned());
        } else if ch.is_whitespace() {
            if self.started {
                self.space.push(ch);
            }
        } else {
            self.release(&ch.to_string(), released);
        }
    }

    /// Releases text, with the whitespace held before it.
    fn release(&mut self, text: &str, released: &mut String) {
        if text.is_empty() {
            return;
        }
        released.push_str(&self.space);
        self.space.clear();
        released.push_str(text);
        self.started = true;
    }

    /// Decides a complete `[…]`.
    fn close(&mut self, candidate: &str, released: &mut String) {
        let inner = &candidate[1..candidate.len() - 1];
        let numbers: Option<Vec<usize>> = inner.split(',').map(|part| part.trim().parse::<usize>().ok()).collect();
        let Some(numbers) = numbers else {
            // `[]`, `[ , ]`, `[1,,2]`: brackets in prose, not a citation.
            self.release(candidate, released);
            return;
        };
        let mut shown = String::new();
        for number in numbers {
            if (1..=self.evidence).contains(&number) {
                let index = number - 1;
                let position = match self.cited.iter().position(|&cited| cited == index) {
                    Some(position) => position,
                    None => {
                        self.cited.push(index);
                        self.cited.len() - 1
                    }
                };
                shown.push_str(&format!("[{}]", position + 1));
            } else {
                self.removed.push(format!("[{number}]"));
            }
        }
        if shown.is_empty() {
            // Removed with the space before it: "fact [9]." reads "fact.".
            self.space.clear();
        } else {
            self.release(&shown, released);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(evidence: usize, pieces: &[&str]) -> (String, CitationFilter) {
        let mut filter = CitationFilter::new(evidence);
        let mut text: String = pieces.iter().map(|piece| filter.push(piece)).collect();
        text.push_str(&filter.finish());
        (text, filter)
    }

    #[test]
    fn valid_citations_are_renumbered_in_order_of_first_use() {
        let (text, filter) = run(3, &["Bees make honey [3", "]. Wax too [1, 3]."]);
        assert_eq!(text, "Bees make honey [1]. Wax too [2][1].");
        assert_eq!(filter.cited(), [2, 0]);
        assert!(filter.removed().is_empty());
    }

    #[test]
    fn citations_of_missing_evidence_are_removed_with_their_space_and_recorded() {
        let (text, filter) = run(2, &["Fact [9]. Other [2] and ", "[0] end [2, 7]"]);
        assert_eq!(text, "Fact. Other [1] and end [1]");
        assert_eq!(filter.removed(), ["[9]", "[0]", "[7]"]);
    }

    #[test]
    fn brackets_that_are_not_citations_pass_through() {
        let (text, _) = run(2, &["See [the docs](x) and a[b] and [] and [12345678901234567890123456789012345 x"]);
        assert_eq!(text, "See [the docs](x) and a[b] and [] and [12345678901234567890123456789012345 x");
    }

    #[test]
    fn held_text_is_released_only_once_decided_and_never_taken_back() {
        let mut filter = CitationFilter::new(1);
        assert_eq!(filter.push("  Hello "), "Hello");
        assert_eq!(filter.push("[1"), "");
        assert_eq!(filter.push("] world  "), " [1] world");
        assert_eq!(filter.finish(), "");
    }

    #[test]
    fn an_unfinished_bracket_at_the_end_is_text() {
        let (text, _) = run(3, &["Ends with [2"]);
        assert_eq!(text, "Ends with [2");
    }
}
