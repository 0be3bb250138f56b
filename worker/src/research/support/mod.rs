//! Whether a passage supports a sentence: the check every answer passes before its trace,
//! the same for the built-in and the `openai` engines. No model is needed.
//!
//! Both texts are tokenized as written ([`tokens`]). A passage `P` supports a claim `C`
//! when all of these hold:
//!
//! 1. **What `C` states exactly is in `P`.** Every number of `C` (with its unit), version,
//!    quoted string and code identifier (dotted name, `snake_case`, `camelCase`) appears in
//!    `P` as written: a number by its value (`16,384` is `16384`; a number up to twenty
//!    may also be written out, `two`), with the same unit or none given in `P`; a version
//!    without its `v`; an identifier case for case, alone or as a part of a dotted name
//!    (`readFile` is in `fs.readFile`); a quoted string anywhere in `P`'s text. A number
//!    written out in `C` (`three`, `twice`) must be in `P` as a word or in digits.
//! 2. **`C`'s words are `P`'s.** At least [`SUPPORT_THRESHOLD`] of `C`'s content words
//!    (stop words aside, each once) are among `P`'s, compared after Snowball English
//!    stemming with possessives and plurals folded (`caused` is `cause`, `moon's` is
//!    `moon`).
//! 3. **Both say yes, or both say no.** Whether `C` denies matches whether its *quote*
//!    denies. The quote is the sentence(s) of `P` that best support `C` (the sentence
//!    sharing most of `C`'s content words, then the next best while that adds any, at most
//!    [`MAX_QUOTE_SENTENCES`]). A clause (cut at `,` `;` `:` and at `and`, `or`, `but`,
//!    `while`, `whereas`, `although`, `though`, `however`) denies when it holds an odd
//!    number of denials (`not`, `no`, `never`, `n't`, `without`, `lacks`, `missing`, a
//!    word negated by `un` such as `unused`, …; `no later than` and `not more than` are
//!    bounds, not denials; `unused … not revoked` affirms; `prevent` and `avoid` deny what
//!    follows them). Each clause of `C` is read against the quote's clause sharing most of
//!    its content words, and both must deny or neither.
//!
//! When an embeddings endpoint is configured, a claim refused by rule 2 alone may still be
//! supported by meaning ([`similar`]): the cosine similarity of the claim and the passage
//! sentence that best supports it at least the documented threshold, rules 1 and 3 still
//! holding against that sentence ([`check_with`]).
//!
//! A claim with no content word states nothing and needs no support. What the check does
//! not see: two entities swapped within one sentence (`the primary pages the secondary`),
//! and paraphrase through words that share no stem (`gravity`, `gravitational` do; `big`,
//! `large` do not).
pub mod similar;
pub mod tokens;
mod words;

use std::collections::HashSet;

use similar::{MAX_COMPARED_SENTENCES, Similarities};
use tokens::{Kind, Token, tokenize};

/// The share of a claim's content words its passage must hold (rule 2).
pub const SUPPORT_THRESHOLD: f64 = 0.5;

/// The most sentences a quote holds.
pub const MAX_QUOTE_SENTENCES: usize = 3;

/// A text read once for the check: its tokens, content stems, exact items and sentences.
#[derive(Debug, Clone)]
pub struct Reading {
    text: String,
    stems: Vec<String>,
    held_stems: HashSet<String>,
    numbers: Vec<(String, Option<&'static str>)>,
    /// Numbers written out: (the word, its digits).
    number_words: Vec<(&'static str, &'static str)>,
    versions: HashSet<String>,
    identifiers: HashSet<String>,
    quoted: Vec<String>,
    sentences: Vec<Span>,
}

/// A sentence of a passage: its place (code points), its clauses' stems and negations.
#[derive(Debug, Clone)]
struct Span {
    start: usize,
    end: usize,
    stems: HashSet<String>,
    /// Its content stems in order, repeats kept.
    terms: Vec<String>,
    clauses: Vec<(HashSet<String>, bool)>,
}

impl Reading {
    /// Reads `text`.
    pub fn new(text: &str) -> Self {
        let tokens = tokenize(text);
        let denials = denials(&tokens);
        let mut reading = Self {
            text: text.to_owned(),
            stems: Vec::new(),
            held_stems: HashSet::new(),
            numbers: Vec::new(),
            number_words: Vec::new(),
            versions: HashSet::new(),
            identifiers: HashSet::new(),
            quoted: Vec::new(),
            sentences: Vec::new(),
        };
        for token in &tokens {
            match &token.kind {
                Kind::Word(word) => {
                    if let Some(written) = words::number_word(word) {
                        reading.number_words.push(written);
                    }
                }
                Kind::Number { value, unit } => reading.numbers.push((value.clone(), *unit)),
                Kind::Version(version) => {
                    reading.versions.insert(version.clone());
                }
                Kind::Identifier(name) => {
                    reading.identifiers.insert(name.clone());
                    for part in name.split('.') {
                        reading.identifiers.insert(part.to_owned());
                    }
                }
                Kind::Quoted(inner) => reading.quoted.push(inner.clone()),
            }
            if let Some(stem) = words::content_stem(&token.kind)
                && reading.held_stems.insert(stem.clone())
            {
                reading.stems.push(stem);
            }
        }
        reading.sentences = sentence_spans(text, &tokens, &denials);
        reading
    }

    /// Its content stems, each once, in order.
    pub fn content_stems(&self) -> &[String] {
        &self.stems
    }

    /// Its sentences with their content stems in order (repeats kept).
    pub fn sentences_with_stems(&self) -> Vec<(String, Vec<String>)> {
        let chars: Vec<char> = self.text.chars().collect();
        self.sentences
            .iter()
            .map(|span| (chars[span.start..span.end].iter().collect::<String>(), span.terms.clone()))
            .collect()
    }

    /// Whether it states something (has a content word).
    pub fn states_something(&self) -> bool {
        !self.stems.is_empty()
    }
}

/// What the check found for one claim and one passage.
#[derive(Debug, Clone, PartialEq)]
pub struct Support {
    /// Whether the passage supports the claim.
    pub supported: bool,
    /// The share of the claim's content words the passage holds.
    pub share: f64,
    /// The quote: the passage's sentences that best support the claim, as ranges of the
    /// passage's text (code points), in text order. Empty when the claim states nothing.
    pub quote: Vec<(usize, usize)>,
    /// Why it is not supported, when it is not.
    pub refusal: Option<Refusal>,
    /// The cosine similarity that supported it, when its words alone did not.
    pub similarity: Option<f64>,
}

/// Why a passage does not support a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The claim states this number, version, identifier or quoted string, which the
    /// passage does not.
    Missing(String),
    /// Too few of the claim's words are the passage's.
    TooFewWords,
    /// The claim denies what the quote affirms, or the other way round.
    Negation,
}

/// Whether `passage` supports `claim` (the module's rules), with the quote.
pub fn check(claim: &Reading, passage: &Reading) -> Support {
    if !claim.states_something() {
        return Support { supported: true, share: 1.0, quote: Vec::new(), refusal: None, similarity: None };
    }
    let held = claim.stems.iter().filter(|stem| passage.held_stems.contains(*stem)).count();
    let share = held as f64 / claim.stems.len() as f64;
    let quote = quote(claim, passage);
    let quote_ranges = quote.iter().map(|span| (span.start, span.end)).collect();
    let refusal = if let Some(missing) = missing_exact(claim, passage) {
        Some(Refusal::Missing(missing))
    } else if share < SUPPORT_THRESHOLD {
        Some(Refusal::TooFewWords)
    } else if !denials_agree(claim, &quote) {
        Some(Refusal::Negation)
    } else {
        None
    };
    Support { supported: refusal.is_none(), share, quote: quote_ranges, refusal, similarity: None }
}

/// [`check`], where a claim refused for too few of the passage's words alone is supported
/// when `similar` finds it and the passage sentence that best supports it (the quote's
/// best, or the most similar of the passage's first [`MAX_COMPARED_SENTENCES`] when none
/// shares a word) at least as similar as its threshold, and that sentence denies as the
/// claim does (clause by clause where they share words, and as a whole). The quote is then
/// that sentence.
pub fn check_with(claim: &Reading, passage: &Reading, similar: &Similarities) -> Support {
    let support = check(claim, passage);
    let Some(threshold) = similar.threshold() else { return support };
    if support.refusal != Some(Refusal::TooFewWords) {
        return support;
    }
    let best = quote(claim, passage).into_iter().rev().max_by_key(|span| shared(claim, span));
    let compared: Vec<&Span> = match best {
        Some(span) if shared(claim, span) > 0 => vec![span],
        _ => passage.sentences.iter().take(MAX_COMPARED_SENTENCES).collect(),
    };
    let chars: Vec<char> = passage.text.chars().collect();
    let mut found: Option<(&Span, f64)> = None;
    for span in compared {
        let sentence: String = chars[span.start..span.end].iter().collect();
        // Every candidate is asked for, so one request brings all a second check needs.
        let Some(value) = similar.cosine(&claim.text, &sentence) else { continue };
        let agree = denials_agree(claim, &[span]) && denies(claim.sentences.iter()) == denies([span].into_iter());
        if value >= threshold && agree && found.is_none_or(|(_, top)| value > top) {
            found = Some((span, value));
        }
    }
    match found {
        Some((span, value)) => Support {
            supported: true,
            quote: vec![(span.start, span.end)],
            refusal: None,
            similarity: Some(value),
            ..support
        },
        None => support,
    }
}

/// Whether sentences deny as a whole (an odd number of their clauses deny): what is
/// compared when a claim and a sentence share too few words for clause to meet clause.
fn denies<'a>(sentences: impl Iterator<Item = &'a Span>) -> bool {
    sentences.flat_map(|span| span.clauses.iter()).fold(false, |denied, (_, denies)| denied ^ denies)
}

/// How many of `claim`'s content stems `span` holds.
fn shared(claim: &Reading, span: &Span) -> usize {
    claim.stems.iter().filter(|stem| span.stems.contains(*stem)).count()
}

/// The first thing `claim` states exactly that `passage` does not (rule 1).
fn missing_exact(claim: &Reading, passage: &Reading) -> Option<String> {
    for (value, unit) in &claim.numbers {
        let as_digits = passage
            .numbers
            .iter()
            .any(|(held, held_unit)| held == value && (unit.is_none() || held_unit.is_none() || held_unit == unit));
        let written_out = passage.number_words.iter().any(|(_, digits)| digits == value);
        if !as_digits && !written_out {
            return Some(value.clone());
        }
    }
    for (word, digits) in &claim.number_words {
        let held = passage.number_words.iter().any(|(_, held)| held == digits)
            || passage.numbers.iter().any(|(value, _)| value == digits);
        if !held {
            return Some((*word).to_owned());
        }
    }
    if let Some(version) = claim.versions.iter().find(|version| !passage.versions.contains(*version)) {
        return Some(version.clone());
    }
    // The claim's own identifiers as written (their dotted parts are for the passage).
    let written = tokenize(&claim.text).into_iter().filter_map(|token| match token.kind {
        Kind::Identifier(name) => Some(name),
        _ => None,
    });
    for name in written {
        if !passage.identifiers.contains(&name) {
            return Some(name);
        }
    }
    claim.quoted.iter().find(|inner| !passage.text.contains(inner.as_str())).cloned()
}

/// The passage's sentences that best support `claim`: the one sharing most of its content
/// stems, then the next best while each adds a stem the others lack, at most
/// [`MAX_QUOTE_SENTENCES`]; in text order.
fn quote<'a>(claim: &Reading, passage: &'a Reading) -> Vec<&'a Span> {
    let wanted: HashSet<&String> = claim.stems.iter().collect();
    let mut covered: HashSet<&String> = HashSet::new();
    let mut chosen: Vec<&Span> = Vec::new();
    while chosen.len() < MAX_QUOTE_SENTENCES {
        let best = passage
            .sentences
            .iter()
            .filter(|span| !chosen.iter().any(|kept| std::ptr::eq(*kept, *span)))
            .map(|span| {
                (span, span.stems.iter().filter(|stem| wanted.contains(stem) && !covered.contains(stem)).count())
            })
            .filter(|(_, adds)| *adds > 0)
            // The most new stems; the earliest sentence of equals.
            .max_by(|left, right| left.1.cmp(&right.1).then(right.0.start.cmp(&left.0.start)));
        let Some((span, _)) = best else { break };
        covered.extend(span.stems.iter().filter(|stem| wanted.contains(stem)));
        chosen.push(span);
    }
    chosen.sort_by_key(|span| span.start);
    chosen
}

/// Whether `claim` denies as its quote does: each clause of the claim is read against the
/// quote's clause sharing most of its content stems (the first of equals), and the
/// claim's clauses read against one quote clause deny together (an odd number of them
/// deny) exactly when that clause denies. A clause that states nothing (`so never do it`)
/// lends its denial to the clause before it; a clause sharing nothing with the quote is not
/// compared.
fn denials_agree(claim: &Reading, quote: &[&Span]) -> bool {
    let quoted: Vec<&(HashSet<String>, bool)> = quote.iter().flat_map(|span| span.clauses.iter()).collect();
    let mut clauses: Vec<(HashSet<String>, bool)> = Vec::new();
    for span in &claim.sentences {
        for (stems, denies) in &span.clauses {
            match clauses.last_mut() {
                Some(previous) if stems.is_empty() => previous.1 ^= *denies,
                _ => clauses.push((stems.clone(), *denies)),
            }
        }
    }
    let mut read_against: Vec<Option<bool>> = vec![None; quoted.len()];
    for (stems, denies) in clauses.iter().filter(|(stems, _)| !stems.is_empty()) {
        let overlaps: Vec<usize> = quoted.iter().map(|clause| clause.0.intersection(stems).count()).collect();
        let best = overlaps.iter().copied().max().unwrap_or(0);
        if let Some(at) = overlaps.iter().position(|overlap| *overlap == best && best > 0) {
            read_against[at] = Some(read_against[at].unwrap_or(false) ^ denies);
        }
    }
    read_against.iter().zip(&quoted).all(|(claimed, clause)| claimed.is_none_or(|denies| denies == clause.1))
}

/// Which tokens deny ([`words::denies`], read in the sequence of words).
fn denials(tokens: &[Token]) -> Vec<bool> {
    let words: Vec<(usize, &str)> = tokens
        .iter()
        .enumerate()
        .filter_map(|(index, token)| match &token.kind {
            Kind::Word(word) => Some((index, word.as_str())),
            _ => None,
        })
        .collect();
    let sequence: Vec<&str> = words.iter().map(|(_, word)| *word).collect();
    let mut denials = vec![false; tokens.len()];
    for (at, (index, _)) in words.iter().enumerate() {
        denials[*index] = words::denies(&sequence, at);
    }
    denials
}

/// The sentences of a text (cut after `.`, `!`, `?` before whitespace, and at line
/// breaks), each with its clauses (cut at `;`, `:`, `,` and the words `but`, `while`,
/// `whereas`, `although`, `though`).
fn sentence_spans(text: &str, tokens: &[Token], denials: &[bool]) -> Vec<Span> {
    let chars: Vec<char> = text.chars().collect();
    let mut bounds = Vec::new();
    let mut start = 0;
    for (at, ch) in chars.iter().enumerate() {
        let ends =
            *ch == '\n' || (matches!(ch, '.' | '!' | '?') && chars.get(at + 1).is_none_or(|next| next.is_whitespace()));
        if ends {
            bounds.push((start, at + 1));
            start = at + 1;
        }
    }
    bounds.push((start, chars.len()));
    let mut spans = Vec::new();
    for (start, end) in bounds {
        let inside: Vec<(&Token, bool)> = tokens
            .iter()
            .zip(denials.iter().copied())
            .filter(|(token, _)| token.start >= start && token.end <= end)
            .collect();
        if inside.is_empty() {
            continue;
        }
        // Trim the span to its first and last token, so a quote holds no stray space, and
        // keep the closing marks and the full stop after the last (`… the guide).`).
        let (first, last) = (inside[0].0.start, inside.iter().map(|(token, _)| token.end).max().unwrap_or(end));
        let closing = |ch: &char| matches!(ch, ')' | ']' | '}' | '"' | '\'' | '”' | '’' | '»' | '.' | '!' | '?');
        let end = last + chars[last.min(end)..end].iter().take_while(|ch| closing(ch)).count();
        let mut clauses: Vec<(HashSet<String>, bool)> = Vec::new();
        let mut current: (HashSet<String>, bool) = (HashSet::new(), false);
        let mut terms = Vec::new();
        let mut previous_end = first;
        for (token, denies) in inside {
            let between: String = chars[previous_end.min(token.start)..token.start].iter().collect();
            let conjunction = matches!(&token.kind, Kind::Word(word) if words::starts_clause(word));
            if between.contains([';', ':', ',']) || conjunction {
                clauses.push(std::mem::take(&mut current));
            }
            previous_end = token.end;
            let stem = words::content_stem(&token.kind);
            terms.extend(stem.clone());
            // A word negated by `un` (`unused`) denies itself, not its clause: a clause of
            // its own.
            if let (Kind::Word(word), Some(stem)) = (&token.kind, &stem)
                && words::negated_by_un(word)
            {
                clauses.push((HashSet::from([stem.clone()]), true));
                continue;
            }
            current.1 ^= denies;
            current.0.extend(stem);
        }
        clauses.push(current);
        let stems = clauses.iter().flat_map(|(stems, _)| stems.iter().cloned()).collect();
        spans.push(Span { start: first, end, stems, terms, clauses });
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supports(claim: &str, passage: &str) -> Support {
        check(&Reading::new(claim), &Reading::new(passage))
    }

    #[test]
    fn faithful_paraphrase_is_supported() {
        let passage = "The gravitational pull of the moon is the main cause of ocean tides.";
        let support = supports("Tides are caused by the moon's gravity", passage);
        assert!(support.supported, "{support:?}");
    }

    #[test]
    fn a_negation_on_one_side_fails() {
        let passage = "The default highWaterMark is 16384 bytes, which suits most streams.";
        assert_eq!(supports("The default highWaterMark is not 16384", passage).refusal, Some(Refusal::Negation));
        assert!(supports("The default highWaterMark is 16,384 bytes", passage).supported);
        let denied = "Secondaries are never paged before the primary has had five minutes.";
        assert_eq!(
            supports("Secondaries are paged before the primary has had five minutes", denied).refusal,
            Some(Refusal::Negation)
        );
    }

    #[test]
    fn exact_items_must_be_in_the_passage() {
        let passage = "Since v15.0.0, fs.readFile accepts an AbortSignal; the encoding may be 'latin1'.";
        assert!(supports("fs.readFile accepts an AbortSignal since v15.0.0", passage).supported);
        assert_eq!(
            supports("fs.readFileSync accepts an AbortSignal since v15.0.0", passage).refusal,
            Some(Refusal::Missing("fs.readFileSync".into()))
        );
        assert_eq!(
            supports("fs.readFile accepts an AbortSignal since v16.0.0", passage).refusal,
            Some(Refusal::Missing("16.0.0".into()))
        );
        assert_eq!(
            supports("The encoding may be 'utf16le'", passage).refusal,
            Some(Refusal::Missing("utf16le".into()))
        );
        assert!(supports("readFile accepts an AbortSignal", passage).supported);
    }

    #[test]
    fn numbers_keep_their_units_and_may_be_written_out() {
        let passage = "A page is acknowledged within 5 minutes, and the handbook is reviewed twice a year.";
        assert!(supports("Pages are acknowledged within five minutes", passage).supported);
        assert!(supports("Pages are acknowledged within 5 min", passage).supported);
        assert!(matches!(
            supports("Pages are acknowledged within 5 seconds", passage).refusal,
            Some(Refusal::Missing(_))
        ));
        assert!(matches!(
            supports("Pages are acknowledged within 15 minutes", passage).refusal,
            Some(Refusal::Missing(_))
        ));
        assert!(matches!(
            supports("The handbook is reviewed three times a year", passage).refusal,
            Some(Refusal::Missing(_))
        ));
    }

    #[test]
    fn the_quote_is_the_best_sentence() {
        let passage = "Tides rise twice a day. The moon's pull causes them. Storms add surges.";
        let support = supports("The moon's pull causes tides", passage);
        let chars: Vec<char> = passage.chars().collect();
        let quoted: Vec<String> =
            support.quote.iter().map(|(start, end)| chars[*start..*end].iter().collect()).collect();
        assert_eq!(quoted, vec!["Tides rise twice a day.".to_owned(), "The moon's pull causes them.".to_owned()]);
    }

    #[test]
    fn unrelated_text_is_not_support() {
        let passage = "Sourdough starters need feeding with flour and water every day.";
        assert_eq!(supports("Tides are caused by the moon", passage).refusal, Some(Refusal::TooFewWords));
    }

    /// Similarities where every pair of texts named is as similar as given, the others
    /// orthogonal (each text its own axis, mixed in for a named pair).
    fn similar(pairs: &[(&str, &str, f32)]) -> Similarities {
        let texts: Vec<&str> = pairs.iter().flat_map(|(a, b, _)| [*a, *b]).collect();
        let mut known = Similarities::at(similar::DEFAULT_THRESHOLD);
        for (at, text) in texts.iter().enumerate() {
            let mut vector = vec![0.0f32; texts.len()];
            vector[at] = 1.0;
            known.insert((*text).to_owned(), vector);
        }
        for (pair, (a, b, value)) in pairs.iter().enumerate() {
            // `b` leans towards `a` so their cosine is `value`.
            let mut vector = vec![0.0f32; texts.len()];
            vector[pair * 2] = *value;
            vector[pair * 2 + 1] = (1.0 - value * value).sqrt();
            known.insert((*b).to_owned(), vector);
            let _ = a;
        }
        known
    }

    #[test]
    fn meaning_supports_a_paraphrase_with_other_words_but_never_a_changed_number_or_denial() {
        let passage = "Large documents are read at a low speed. Nothing else matters.";
        let claim = "Big files load slowly";
        let sentence = "Large documents are read at a low speed.";
        let lexical = supports(claim, passage);
        assert_eq!(lexical.refusal, Some(Refusal::TooFewWords));
        assert!(Similarities::none().wanted().is_empty());

        // First pass: the texts it needs are wanted (no shared word: every sentence).
        let asking = Similarities::at(similar::DEFAULT_THRESHOLD);
        let first = check_with(&Reading::new(claim), &Reading::new(passage), &asking);
        assert!(!first.supported);
        assert_eq!(asking.wanted().len(), 3, "{:?}", asking.wanted());

        let close = similar(&[(claim, sentence, 0.9)]);
        let supported = check_with(&Reading::new(claim), &Reading::new(passage), &close);
        assert!(supported.supported, "{supported:?}");
        assert_eq!(supported.quote, vec![(0, sentence.chars().count())]);
        assert!(supported.similarity.is_some_and(|value| (value - 0.9).abs() < 1e-6));

        let far = similar(&[(claim, sentence, 0.5)]);
        assert!(!check_with(&Reading::new(claim), &Reading::new(passage), &far).supported);

        // Rule 1 and rule 3 hold whatever the similarity.
        let numbered = "Files over 2 GiB load slowly";
        let close = similar(&[(numbered, sentence, 0.99)]);
        let refused = check_with(&Reading::new(numbered), &Reading::new(passage), &close);
        assert_eq!(refused.refusal, Some(Refusal::Missing("2".into())));
        let denied = "Big files never load slowly";
        let close = similar(&[(denied, sentence, 0.99)]);
        assert!(!check_with(&Reading::new(denied), &Reading::new(passage), &close).supported);
    }
}
