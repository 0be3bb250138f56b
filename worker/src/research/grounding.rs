//! Whether an answer says only what its sources say (no model needed): an answer is cut
//! into sentences (and a sentence with citations inside it into the claims each citation
//! closes); a sentence's citations (`[n]`) name evidence items; a cited item *supports* a
//! sentence when the support check ([`crate::research::support`]: exact numbers, versions,
//! identifiers and quoted strings, stemmed content words, matching denials) says so. A
//! sentence with no content words (a bare citation mark, a heading of stop words) states
//! nothing and needs no citation.
//!
//! The `openai` engine passes every answer through [`ground`] before it is committed; the
//! quality bench (`cargo bench --bench answers`) scores answers with the same check.
use std::collections::HashSet;

use crate::knowledge::search::search_terms;
use crate::research::best_sentence::best_sentence;
use crate::research::readable::readable;
use crate::research::support::similar::Similarities;
use crate::research::support::{self, Reading};

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

/// Whether `passage` supports `sentence` (its citations aside), by the support check.
pub fn supports(sentence: &Sentence, passage: &str) -> bool {
    support::check(&Reading::new(&without_citations(&sentence.text)), &Reading::new(passage)).supported
}

/// `text` cut into sentences: after `.`, `!` or `?` (and any citations right after it)
/// followed by whitespace, at line breaks, and after a citation that more words follow
/// (`honey [1] and wax [2]` is two claims). A citation written after the full stop
/// (`… the sun. [1]`) belongs to the sentence before it.
pub fn sentences(text: &str) -> Vec<Sentence> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut index = 0;
    // Where the last `[` stands, so a `]` is matched without reading back.
    let mut last_open = None;
    while index < chars.len() {
        let ch = chars[index];
        current.push(ch);
        index += 1;
        if ch == '[' {
            last_open = Some(index - 1);
        }
        let closes_citation = ch == ']' && last_open.is_some_and(|open| citation_at(&chars, open) == Some(index));
        if closes_citation && starts_a_claim(&chars[index..]) {
            // `… the moon [1] the sun …`: what a citation follows is the claim it supports,
            // so the words after it are checked on their own.
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

/// Whether `rest` is whitespace and then words (not punctuation that ends the claim).
fn starts_a_claim(rest: &[char]) -> bool {
    let mut chars = rest.iter().skip_while(|ch| **ch == ' ');
    rest.first() == Some(&' ') && chars.next().is_some_and(|ch| !matches!(ch, '.' | ',' | ';' | ':' | '!' | '?'))
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

/// `text` without its citations (nor the spaces before them).
fn without_citations(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < chars.len() {
        match citation_at(&chars, at) {
            Some(end) => {
                out.truncate(out.trim_end().len());
                at = end;
            }
            None => {
                out.push(chars[at]);
                at += 1;
            }
        }
    }
    out.trim().to_owned()
}

/// What the check found for one citation or sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The cited evidence supports the sentence.
    Supported,
    /// The citation named evidence that does not support the sentence; it now names the
    /// evidence that does.
    Moved,
    /// The citation named no evidence, or evidence that does not support the sentence
    /// while none does: it was removed.
    RemovedCitation,
    /// No evidence supports the sentence (or it was only citation marks): it was removed.
    RemovedSentence,
    /// The sentence carried no citation; it now cites the evidence that supports it best.
    Attributed,
    /// No supported sentence remained: the answer is the extractive one over the same
    /// evidence.
    ExtractiveFallback,
    /// The evidence sentence that best answers the question was not stated: it now leads
    /// the answer, cited.
    AddedFromEvidence,
}

/// One verdict: the sentence (as the model wrote it), the citation it concerns (the final
/// number for a kept citation, the number as written for a removed one), the number the
/// model wrote (none where it wrote none) and the verdict.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    /// The sentence as written.
    pub sentence: String,
    /// The citation number, when the verdict concerns one.
    pub citation: Option<usize>,
    /// The citation's number as the model wrote it, when it wrote one.
    pub written_citation: Option<usize>,
    /// What was found.
    pub verdict: Verdict,
}

impl Check {
    /// `sentence` (as written) removed: nothing supports it, or it states nothing.
    fn removed_sentence(sentence: &str) -> Self {
        Self {
            sentence: sentence.to_owned(),
            citation: None,
            written_citation: None,
            verdict: Verdict::RemovedSentence,
        }
    }
}

/// One citation of a kept sentence: the evidence it names (an index into the evidence the
/// answer was written over), the verdict that kept it and its quote (the ranges of the
/// evidence's readable text, code points, that best support the sentence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cite {
    /// The evidence item.
    pub index: usize,
    /// Why the citation stands.
    pub verdict: Verdict,
    /// The sentence(s) of the evidence that support the sentence, in text order.
    pub quote: Vec<(usize, usize)>,
}

/// A sentence of the final answer, as it stands there, with its citations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CitedSentence {
    /// The sentence as the final answer shows it, citation marks included.
    pub text: String,
    /// Its citations, in the order of its marks.
    pub cites: Vec<Cite>,
}

/// An answer after the check: its text, the evidence it cites (indexes into the evidence
/// it was written over, in citation order: `cited[0]` is `[1]`) and every verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Grounded {
    /// The answer.
    pub text: String,
    /// What `[n]` names: `cited[n - 1]`.
    pub cited: Vec<usize>,
    /// The verdicts, sentence by sentence.
    pub checks: Vec<Check>,
    /// Each kept claim without its citations, with the evidence it cites (indexes into
    /// the evidence, as in `cited`): what a model is asked to verify.
    pub claims: Vec<(String, Vec<usize>)>,
    /// The final answer's sentences with their citations and quotes.
    pub sentences: Vec<CitedSentence>,
}

impl Grounded {
    /// The same sentences as `text` shows them (the same answer, renumbered by the
    /// writer that streamed it); unchanged when `text` does not cut into as many.
    pub fn restated(mut self, text: &str) -> Self {
        let cut = sentences(text);
        if cut.len() == self.sentences.len() {
            for (sentence, restated) in self.sentences.iter_mut().zip(cut) {
                sentence.text = restated.text;
            }
        }
        self
    }
}

/// Claims a model judged unsupported by a passage: (the claim without citations, the
/// evidence index). [`ground_with`] never lets such a claim cite that passage.
pub type Vetoes = HashSet<(String, usize)>;

/// Checks `text` (whose `[n]` names `evidence[cited[n - 1]]`) against the evidence it was
/// written over: supported citations stay, unsupported ones move to the evidence that
/// supports the sentence best or go, uncited sentences are attributed to their best
/// support, and sentences nothing supports are removed. `None` when no sentence that
/// states something remains (the caller answers extractively). An answer that passes
/// whole keeps its text exactly; one that changed is rebuilt sentence by sentence, its
/// citations renumbered in order of first use.
pub fn ground(text: &str, sources: &Sources<'_>, cited: &[usize]) -> Option<Grounded> {
    ground_with(text, sources, cited, &Aids::default())
}

/// What the check may use beyond the texts, each fetched by the caller: a model's vetoes,
/// embeddings for the meaning fallback, and the evidence sentence a reranker put first.
#[derive(Debug, Default)]
pub struct Aids {
    /// Claims a model judged unsupported by a passage.
    pub vetoes: Vetoes,
    /// Embeddings the support check may compare ([`support::check_with`]).
    pub similar: Similarities,
    /// The evidence sentence (its item's index and text) that best answers the question,
    /// when a reranker chose it; otherwise BM25 chooses ([`best_sentence`]).
    pub lead: Option<(usize, String)>,
}

/// What an answer is checked against: the evidence's readable texts, their labels (titles
/// and headings, which a sentence must not merely repeat) and the question (whose best
/// evidence sentence the answer must hold; empty for none).
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// The evidence items' readable texts, as numbered for the answer's writer.
    pub texts: &'a [&'a str],
    /// The evidence's titles and headings.
    pub labels: &'a [String],
    /// The question.
    pub question: &'a str,
}

/// [`ground`] with `aids`: a claim never cites a passage the vetoes pair it with (such a
/// citation moves to other supporting evidence or is removed, like one the lexical check
/// refuses), a claim may be supported by meaning ([`support::check_with`]), and the lead
/// sentence, when given, is the one the answer must hold.
pub fn ground_with(text: &str, sources: &Sources<'_>, cited: &[usize], aids: &Aids) -> Option<Grounded> {
    let (vetoes, similar) = (&aids.vetoes, &aids.similar);
    let evidence = sources.texts;
    let labels: HashSet<String> =
        sources.labels.iter().map(|label| normalized(label)).filter(|label| !label.is_empty()).collect();
    // Each passage read once, not once per sentence.
    let readings: Vec<Reading> = evidence.iter().map(|passage| Reading::new(passage)).collect();
    let mut kept: Vec<(String, Vec<usize>)> = Vec::new();
    // The citations of each kept sentence, beside `kept`.
    let mut kept_cites: Vec<Vec<Cite>> = Vec::new();
    let mut checks = Vec::new();
    let mut changed = false;
    let mut said: HashSet<Vec<String>> = HashSet::new();
    for sentence in sentences(text) {
        // Markup copied from the evidence goes (the sentence is kept without it).
        let written = without_citations(&sentence.text);
        let prose = readable(&written).text;
        changed |= prose != written;
        let words = content_words(&prose);
        // Citation marks, punctuation or markup alone state nothing, nor does a question
        // (weak models restate the one asked), nor a title or heading path copied from
        // the evidence; a claim already made (a weak model repeating itself) adds
        // nothing. None is shown.
        let asks = prose.ends_with('?');
        if words.is_empty() || asks || is_label(&prose, &labels) || !said.insert(words.clone()) {
            changed = true;
            checks.push(Check::removed_sentence(&sentence.text));
            continue;
        }
        let claim = Reading::new(&prose);
        let allowed = |index: usize| !vetoes.contains(&(prose.clone(), index));
        let verdicts: Vec<support::Support> =
            readings.iter().map(|passage| support::check_with(&claim, passage, similar)).collect();
        let supported = |index: usize| allowed(index) && verdicts.get(index).is_some_and(|verdict| verdict.supported);
        let best = best_support(&verdicts, &allowed);
        // (evidence index, verdict, the number as written)
        let mut names: Vec<(usize, Verdict, Option<usize>)> = Vec::new();
        for &number in &sentence.citations {
            match number.checked_sub(1).and_then(|at| cited.get(at)).copied() {
                Some(index) if supported(index) => {
                    names.push((index, Verdict::Supported, Some(number)));
                }
                Some(_) if best.is_some() => {
                    changed = true;
                    names.push((best.unwrap_or_default(), Verdict::Moved, Some(number)));
                }
                _ => {
                    changed = true;
                    let check = Check {
                        sentence: sentence.text.clone(),
                        citation: Some(number),
                        written_citation: Some(number),
                        verdict: Verdict::RemovedCitation,
                    };
                    checks.push(check);
                }
            }
        }
        if names.is_empty() {
            match best {
                Some(index) => {
                    changed = true;
                    names.push((index, Verdict::Attributed, None));
                }
                None => {
                    changed = true;
                    checks.push(Check::removed_sentence(&sentence.text));
                    continue;
                }
            }
        }
        let mut indexes = Vec::new();
        let mut cites = Vec::new();
        for (index, verdict, written_citation) in names {
            checks.push(Check { sentence: sentence.text.clone(), citation: Some(index), written_citation, verdict });
            if !indexes.contains(&index) {
                indexes.push(index);
                let quote = verdicts.get(index).map(|found| found.quote.clone()).unwrap_or_default();
                cites.push(Cite { index, verdict, quote });
            }
        }
        kept.push((prose, indexes));
        kept_cites.push(cites);
    }
    if kept.is_empty() {
        return None;
    }
    // The evidence sentence that best answers the question leads the answer unless the
    // answer states it already (or it is only a title or heading, which states nothing).
    let lead = aids.lead.clone().or_else(|| best_sentence(sources.question, &readings));
    if let Some((index, sentence)) = lead.filter(|(index, _)| *index < readings.len())
        && !is_label(&sentence, &labels)
    {
        let answer: Vec<&str> = kept.iter().map(|(prose, _)| prose.as_str()).collect();
        let best = Reading::new(&sentence);
        let stated = support::check(&best, &Reading::new(&answer.join(" "))).supported;
        if !stated && !vetoes.contains(&(sentence.clone(), index)) {
            changed = true;
            let check = Check {
                sentence: sentence.clone(),
                citation: Some(index),
                written_citation: None,
                verdict: Verdict::AddedFromEvidence,
            };
            checks.insert(0, check);
            let quote = readings.get(index).map(|passage| support::check(&best, passage).quote);
            let cite = Cite { index, verdict: Verdict::AddedFromEvidence, quote: quote.unwrap_or_default() };
            kept.insert(0, (sentence, vec![index]));
            kept_cites.insert(0, vec![cite]);
        }
    }
    // Final numbers, in order of first use; checks name evidence by index until here.
    let mut order: Vec<usize> = Vec::new();
    for index in kept.iter().flat_map(|(_, indexes)| indexes) {
        if !order.contains(index) {
            order.push(*index);
        }
    }
    let number = |index: usize| order.iter().position(|&at| at == index).map_or(0, |at| at + 1);
    for check in &mut checks {
        if check.verdict != Verdict::RemovedCitation {
            check.citation = check.citation.map(number);
        }
    }
    if !changed {
        let sentences = sentences(text)
            .into_iter()
            .zip(kept_cites)
            .map(|(sentence, cites)| CitedSentence { text: sentence.text, cites })
            .collect();
        return Some(Grounded { text: text.trim().to_owned(), cited: cited.to_vec(), checks, claims: kept, sentences });
    }
    let rebuilt: Vec<String> = kept
        .iter()
        .map(|(prose, indexes)| {
            let marks: String = indexes.iter().map(|&index| format!("[{}]", number(index))).collect();
            let prose = prose.trim();
            match prose.char_indices().last() {
                Some((at, end)) if matches!(end, '.' | '!' | '?') => format!("{} {marks}{end}", prose[..at].trim_end()),
                _ => format!("{prose} {marks}"),
            }
        })
        .collect();
    let sentences =
        rebuilt.iter().zip(kept_cites).map(|(text, cites)| CitedSentence { text: text.clone(), cites }).collect();
    Some(Grounded { text: rebuilt.join(" "), cited: order, checks, claims: kept, sentences })
}

/// `text` lower-cased, its words joined by single spaces (punctuation out).
fn normalized(text: &str) -> String {
    text.split(|ch: char| !ch.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Whether `prose` is only labels of the evidence (a title, a heading, or a breadcrumb of
/// them: `cluster — Cluster › How it works`).
fn is_label(prose: &str, labels: &HashSet<String>) -> bool {
    if labels.is_empty() {
        return false;
    }
    let parts: Vec<String> = prose
        .replace(" - ", " › ")
        .split(['›', '»', '—', '–', '>', '|', '/', ':'])
        .map(normalized)
        .filter(|part| !part.is_empty())
        .collect();
    !parts.is_empty() && (labels.contains(&normalized(prose)) || parts.iter().all(|part| labels.contains(part)))
}

/// The evidence that supports a claim best (the largest share of its words), if any does
/// (ties to the first).
fn best_support(verdicts: &[support::Support], allowed: &dyn Fn(usize) -> bool) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (index, verdict) in verdicts.iter().enumerate() {
        if allowed(index) && verdict.supported && best.is_none_or(|(_, top)| verdict.share > top) {
            best = Some((index, verdict.share));
        }
    }
    best.map(|(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The evidence and labels, with no question (nothing is added).
    fn sources<'a>(texts: &'a [&'a str], labels: &'a [String]) -> Sources<'a> {
        Sources { texts, labels, question: "" }
    }

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
    fn a_citation_before_more_words_ends_a_claim_and_decimals_and_prose_brackets_do_not() {
        let cut = sentences("Tides follow the moon [1] The sun adds to them [2] and the wind [3], mostly.");
        let texts: Vec<&str> = cut.iter().map(|sentence| sentence.text.as_str()).collect();
        assert_eq!(texts, ["Tides follow the moon [1]", "The sun adds to them [2]", "and the wind [3], mostly."]);
        let cut = sentences("Water boils at 99.6 degrees [2], less in [the] hills.");
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].citations, [2]);
    }

    #[test]
    fn support_is_the_support_check_on_the_claim_without_its_citations() {
        let sentence = &sentences("Tides are caused by the moon [1].")[0];
        assert_eq!(sentence.content_words(), ["tides", "caused", "moon"]);
        assert!(supports(sentence, "Tides are caused by the pull of the moon and the sun."));
        assert!(!supports(sentence, "Bees make honey from nectar."));
        let marks = &sentences("[1] [2] [3]")[0];
        assert!(!marks.states_something());
    }

    #[test]
    fn faithful_paraphrase_passes_and_contradiction_does_not() {
        let evidence = [
            "The gravitational pull of the moon is the main cause of ocean tides.",
            "The default highWaterMark is 16384 bytes for byte streams.",
        ];
        let grounded =
            ground("Tides are caused by the moon's gravity [1].", &sources(&evidence, &[]), &[0]).expect("supported");
        assert_eq!(verdicts(&grounded), [(Some(1), Verdict::Supported)]);
        let denied = ground("The default highWaterMark is not 16384 [1].", &sources(&evidence, &[]), &[1]);
        assert!(denied.is_none(), "{denied:?}");
        let changed = ground("The default highWaterMark is 65536 bytes [1].", &sources(&evidence, &[]), &[1]);
        assert!(changed.is_none(), "{changed:?}");
    }

    #[test]
    fn titles_breadcrumbs_and_markup_state_nothing() {
        let evidence = ["The cluster module lets Node.js processes share server ports."];
        let labels = ["cluster".to_owned(), "Cluster".to_owned(), "How it works".to_owned()];
        let text = "cluster — Cluster › How it works [1]. The <strong>cluster</strong> module lets processes share \
                    server ports [1]. <!--introduced_in=v0.10.0--> [1]";
        let grounded = ground(text, &sources(&evidence, &labels), &[0]).expect("one claim stands");
        assert_eq!(grounded.text, "The cluster module lets processes share server ports [1].");
        let removed = grounded.checks.iter().filter(|check| check.verdict == Verdict::RemovedSentence).count();
        assert_eq!(removed, 2, "{:?}", grounded.checks);
    }

    #[test]
    fn the_best_evidence_sentence_leads_an_answer_that_does_not_state_it() {
        let evidence = [
            "Streams move data between places.",
            "Writable streams buffer data. The default highWaterMark of a byte stream is 16384 bytes.",
        ];
        let sources = Sources { texts: &evidence, labels: &[], question: "What is the default highWaterMark?" };
        let grounded = ground("Streams move data between places [1].", &sources, &[0]).expect("supported");
        assert_eq!(
            grounded.text,
            "The default highWaterMark of a byte stream is 16384 bytes [1]. Streams move data between places [2]."
        );
        assert_eq!(grounded.cited, [1, 0]);
        assert_eq!(grounded.checks[0].verdict, Verdict::AddedFromEvidence);
        // A heading is never what is added: it states nothing.
        let headed = ["Buffering\nStreams keep data in memory."];
        let labels = ["Buffering".to_owned()];
        let sources = Sources { texts: &headed, labels: &labels, question: "buffering" };
        let grounded = ground("Streams keep data in memory [1].", &sources, &[0]).expect("supported");
        assert_eq!(grounded.text, "Streams keep data in memory [1].");
        let sources = Sources { texts: &evidence, labels: &[], question: "What is the default highWaterMark?" };
        // An answer that states it is left as written.
        let stating = "The default highWaterMark of a byte stream is 16384 bytes [2].";
        let grounded = ground(stating, &sources, &[0, 1]).expect("supported");
        assert_eq!(grounded.text, stating);
    }

    const EVIDENCE: [&str; 3] = [
        "Bees make honey from nectar. Worker bees fan it until it thickens.",
        "Bees store honey in wax combs made by worker bees.",
        "Tides are caused by the pull of the moon and the sun.",
    ];

    fn verdicts(grounded: &Grounded) -> Vec<(Option<usize>, Verdict)> {
        grounded.checks.iter().map(|check| (check.citation, check.verdict)).collect()
    }

    #[test]
    fn a_supported_answer_keeps_its_text_exactly() {
        let text = "Bees make honey from nectar [1].\n\nTides follow the pull of the moon [2].";
        let grounded = ground(text, &sources(&EVIDENCE, &[]), &[0, 2]).expect("supported");
        assert_eq!(grounded.text, text);
        assert_eq!(grounded.cited, [0, 2]);
        assert_eq!(verdicts(&grounded), [(Some(1), Verdict::Supported), (Some(2), Verdict::Supported)]);
    }

    #[test]
    fn wrong_citations_move_missing_ones_go_and_uncited_claims_are_attributed_or_removed() {
        // [1] names the tides passage for a honey claim; [7] names nothing; the wax claim
        // has no citation; the Mars claim has no support anywhere.
        let text = "Bees make honey from nectar [1]. Tides come from the moon [2][7]. Wax combs store honey. Bees fly to Mars [2].";
        let grounded = ground(text, &sources(&EVIDENCE, &[]), &[2, 2]).expect("something is supported");
        assert_eq!(
            grounded.text,
            "Bees make honey from nectar [1]. Tides come from the moon [2]. Wax combs store honey [3]."
        );
        assert_eq!(grounded.cited, [0, 2, 1]);
        assert_eq!(
            verdicts(&grounded),
            [
                (Some(1), Verdict::Moved),
                (Some(7), Verdict::RemovedCitation),
                (Some(2), Verdict::Supported),
                (Some(3), Verdict::Attributed),
                (Some(2), Verdict::RemovedCitation),
                (None, Verdict::RemovedSentence),
            ]
        );
    }

    #[test]
    fn a_claim_a_model_refuted_never_cites_that_passage_again() {
        let text = "Bees make honey from nectar [1]. Tides come from the moon [2].";
        let first = ground(text, &sources(&EVIDENCE, &[]), &[0, 2]).expect("supported");
        assert_eq!(
            first.claims,
            [("Bees make honey from nectar.".to_owned(), vec![0]), ("Tides come from the moon.".to_owned(), vec![2])]
        );
        // The model said the honey passage does not support the honey claim: it moves to
        // the wax passage, which holds half its words.
        let claim = "Bees make honey from nectar.".to_owned();
        let vetoes = Vetoes::from([(claim.clone(), 0)]);
        let moved =
            ground_with(text, &sources(&EVIDENCE, &[]), &[0, 2], &Aids { vetoes: vetoes.clone(), ..Aids::default() })
                .expect("supported");
        assert_eq!(moved.text, "Bees make honey from nectar [1]. Tides come from the moon [2].");
        assert_eq!(moved.cited, [1, 2]);
        assert_eq!(verdicts(&moved), [(Some(1), Verdict::Moved), (Some(2), Verdict::Supported)]);
        // Refuted for both: nothing else supports it, so it goes.
        let vetoes = Vetoes::from([(claim.clone(), 0), (claim, 1)]);
        let removed =
            ground_with(text, &sources(&EVIDENCE, &[]), &[0, 2], &Aids { vetoes: vetoes.clone(), ..Aids::default() })
                .expect("the tides claim stays");
        assert_eq!(removed.text, "Tides come from the moon [1].");
        assert_eq!(removed.cited, [2]);
        assert_eq!(
            verdicts(&removed),
            [(Some(1), Verdict::RemovedCitation), (None, Verdict::RemovedSentence), (Some(1), Verdict::Supported)]
        );
    }

    #[test]
    fn a_question_states_nothing() {
        let text = "How do bees make honey? [1] Bees make honey from nectar [1].";
        let grounded = ground(text, &sources(&EVIDENCE, &[]), &[0]).expect("the claim stays");
        assert_eq!(grounded.text, "Bees make honey from nectar [1].");
        assert_eq!(verdicts(&grounded), [(None, Verdict::RemovedSentence), (Some(1), Verdict::Supported)]);
    }

    #[test]
    fn a_claim_repeated_is_shown_once() {
        let text = "Bees make honey from nectar [1]. Bees make honey from nectar [1]. Bees make honey from nectar.";
        let grounded = ground(text, &sources(&EVIDENCE, &[]), &[0]).expect("supported");
        assert_eq!(grounded.text, "Bees make honey from nectar [1].");
        let removed = grounded.checks.iter().filter(|check| check.verdict == Verdict::RemovedSentence).count();
        assert_eq!(removed, 2);
    }

    #[test]
    fn a_long_answer_full_of_brackets_is_cut_into_its_claims() {
        let text = "x] ".repeat(100_000) + "[1] " + &"word [1] ".repeat(20_000);
        let cut = sentences(&text);
        assert_eq!(cut.len(), 20_001);
        assert!(cut.iter().all(|sentence| sentence.citations == [1]));
    }

    #[test]
    fn an_answer_of_citation_marks_or_unsupported_claims_has_nothing_left() {
        assert_eq!(ground("[1] [2] [3]", &sources(&EVIDENCE, &[]), &[0, 1, 2]), None);
        assert_eq!(ground("Rust has no garbage collector [1].", &sources(&EVIDENCE, &[]), &[0]), None);
    }
}
