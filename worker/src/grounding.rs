//! Whether an answer says only what its sources say, checked lexically (no model needed):
//! an answer is cut into sentences; a sentence's citations (`[n]`) name evidence items; a
//! cited item *supports* a sentence when it holds at least [`SUPPORT_THRESHOLD`] of the
//! sentence's content words (lower-cased words of letters and digits, stop words and
//! citation numbers aside, each counted once). A sentence with no content words (a bare
//! citation mark, a heading of stop words) states nothing and needs no citation.
//!
//! The quality bench (`cargo bench --bench answers`) scores answers with it.
use crate::knowledge::search::search_terms;

/// The share of a sentence's content words a cited passage must hold to support it.
pub const SUPPORT_THRESHOLD: f64 = 0.5;

/// One sentence of an answer with the citation numbers it carries (1-based, as written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentence {
    /// The sentence as written, citations included, trimmed.
    pub text: String,
    /// The numbers of its citations, in order, repeats kept once.
    pub citations: Vec<usize>,
}

impl Sentence {
    /// Its content words (the citation numbers are not words of the claim).
    pub fn content_words(&self) -> Vec<String> {
        content_words(&without_citations(&self.text))
    }

    /// Whether it states something (has a content word).
    pub fn states_something(&self) -> bool {
        !self.content_words().is_empty()
    }
}

/// Lower-cased content words of `text`, each once, in order.
pub fn content_words(text: &str) -> Vec<String> {
    search_terms(text)
}

/// The share of `sentence`'s content words that `passage` holds: 1.0 for a sentence with
/// none.
pub fn support(sentence: &Sentence, passage: &str) -> f64 {
    let words = sentence.content_words();
    if words.is_empty() {
        return 1.0;
    }
    let held = content_words(passage);
    let shared = words.iter().filter(|word| held.contains(word)).count();
    shared as f64 / words.len() as f64
}

/// Whether `passage` supports `sentence` ([`SUPPORT_THRESHOLD`]).
pub fn supports(sentence: &Sentence, passage: &str) -> bool {
    support(sentence, passage) >= SUPPORT_THRESHOLD
}

/// `text` cut into sentences: after `.`, `!` or `?` (and any citations right after it)
/// followed by whitespace, and at line breaks. A citation written after the full stop
/// (`… the sun. [1]`) belongs to the sentence before it.
pub fn sentences(text: &str) -> Vec<Sentence> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut index = 0;
    while index < chars.len() {
        let ch = chars[index];
        current.push(ch);
        index += 1;
        if ch == ']' && ends_with_citation(&current) && starts_a_sentence(&chars[index..]) {
            // `… the moon [1] The sun …`: a citation then a capital begins a new sentence.
            push(&mut out, &current);
            current.clear();
            continue;
        }
        let ends = matches!(ch, '.' | '!' | '?') || ch == '\n';
        if !ends {
            continue;
        }
        // Citations (and the spaces before them) right after the end go with this sentence.
        loop {
            let mut look = index;
            while look < chars.len() && chars[look] == ' ' {
                look += 1;
            }
            let Some(close) = citation_at(&chars, look) else { break };
            current.extend(&chars[index..close]);
            index = close;
        }
        if index >= chars.len() || chars[index].is_whitespace() || ch == '\n' {
            push(&mut out, &current);
            current.clear();
        }
    }
    push(&mut out, &current);
    out
}

/// Whether `text` ends with a citation.
fn ends_with_citation(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    chars.iter().rposition(|&ch| ch == '[').is_some_and(|open| citation_at(&chars, open) == Some(chars.len()))
}

/// Whether `rest` is whitespace and then a capital letter.
fn starts_a_sentence(rest: &[char]) -> bool {
    let mut chars = rest.iter().skip_while(|ch| **ch == ' ');
    rest.first() == Some(&' ') && chars.next().is_some_and(|ch| ch.is_uppercase())
}

/// The end (exclusive) of a citation `[n]` or `[n, m]` starting at `at`, if one does.
fn citation_at(chars: &[char], at: usize) -> Option<usize> {
    if chars.get(at) != Some(&'[') {
        return None;
    }
    let mut end = at + 1;
    while end < chars.len() && (chars[end].is_ascii_digit() || chars[end] == ',' || chars[end] == ' ') {
        end += 1;
    }
    (chars.get(end) == Some(&']') && chars[at + 1..end].iter().any(char::is_ascii_digit)).then_some(end + 1)
}

fn push(out: &mut Vec<Sentence>, text: &str) {
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    out.push(Sentence { text: text.to_owned(), citations: citations(text) });
}

/// The citation numbers in `text`, in order, each once.
fn citations(text: &str) -> Vec<usize> {
    let chars: Vec<char> = text.chars().collect();
    let mut numbers = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        match citation_at(&chars, at) {
            Some(end) => {
                let inner: String = chars[at + 1..end - 1].iter().collect();
                for number in inner.split(',').filter_map(|part| part.trim().parse::<usize>().ok()) {
                    if !numbers.contains(&number) {
                        numbers.push(number);
                    }
                }
                at = end;
            }
            None => at += 1,
        }
    }
    numbers
}

/// `text` without its citations.
fn without_citations(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < chars.len() {
        match citation_at(&chars, at) {
            Some(end) => at = end,
            None => {
                out.push(chars[at]);
                at += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_keep_the_citations_written_after_their_full_stop() {
        let cut = sentences("Tides follow the moon [1]. The sun adds to them. [2]\nSpring tides are high [1, 3]! Why?");
        let texts: Vec<&str> = cut.iter().map(|sentence| sentence.text.as_str()).collect();
        assert_eq!(
            texts,
            ["Tides follow the moon [1].", "The sun adds to them. [2]", "Spring tides are high [1, 3]!", "Why?"]
        );
        let citations: Vec<Vec<usize>> = cut.iter().map(|sentence| sentence.citations.clone()).collect();
        assert_eq!(citations, [vec![1], vec![2], vec![1, 3], vec![]]);
    }

    #[test]
    fn a_citation_before_a_capital_ends_a_sentence_and_decimals_and_prose_brackets_do_not() {
        let cut = sentences("Tides follow the moon [1] The sun adds to them [2] and the wind [3]");
        let texts: Vec<&str> = cut.iter().map(|sentence| sentence.text.as_str()).collect();
        assert_eq!(texts, ["Tides follow the moon [1]", "The sun adds to them [2] and the wind [3]"]);
        let cut = sentences("Water boils at 99.6 degrees [2] in [the] hills.");
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].citations, [2]);
    }

    #[test]
    fn support_is_the_share_of_the_claims_content_words_the_passage_holds() {
        let sentence = &sentences("Tides are caused by the moon [1].")[0];
        assert_eq!(sentence.content_words(), ["tides", "caused", "moon"]);
        assert!(supports(sentence, "Tides are caused by the pull of the moon and the sun."));
        assert!(!supports(sentence, "Bees make honey from nectar."));
        let marks = &sentences("[1] [2] [3]")[0];
        assert!(!marks.states_something());
    }
}
