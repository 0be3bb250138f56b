//! An answer's citations as a reader checks them: one per citation mark of the final
//! answer, with the sentence as it stands there, the verdict that kept it and its *quote*,
//! the sentence(s) of the cited passage that support it.
//!
//! A quote is found in the passage's readable text (what the model saw, see
//! [`crate::research::readable`]); its text is those sentence(s) joined by a space. Its
//! range is the smallest half-open range of the document's content (code points, as a
//! passage's `char_start`/`char_end`) holding them: the readable text maps back to the
//! stored passage text, and the splitter's offset map ([`entity::SourceMap`]) maps that to
//! the content. A passage split before maps were recorded gives its whole range; a passage
//! whose row is gone (its document changed since) gives its range too, with no revision.
use serde::{Deserialize, Serialize};

pub use crate::research::cited::{AnswerCitation, PassageQuote, answer_citations};
use crate::research::engine::Passage;
use crate::research::grounding::{self, Verdict};

/// One citation of an answer trace as stored and shown (`AnswerTrace.citations`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CitationRecord {
    /// `[n]`: the trace's n-th evidence item.
    pub n: usize,
    /// The sentence as it stands in the final answer.
    pub sentence: String,
    /// The verdict; none for traces from before checks.
    pub verdict: Option<Verdict>,
    /// The quote; none for traces from before quotes.
    pub quote: Option<QuoteRecord>,
}

/// A quote located in its document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuoteRecord {
    /// The supporting sentence(s), as the model was shown them.
    pub text: String,
    /// Where they start in the document's content (code points).
    pub char_start: i32,
    /// Where they end (exclusive).
    pub char_end: i32,
    /// The PDF page they are on, when there is one.
    pub page_start: Option<i32>,
    /// The last such page.
    pub page_end: Option<i32>,
    /// The document revision the passage was split from; none when its row is gone.
    pub document_revision: Option<i32>,
}

/// What locates a quote of one passage in its document: the revision it was split from
/// and its offset map (none for a passage split before maps were recorded).
#[derive(Debug, Clone)]
pub struct PassagePlace {
    /// The document revision.
    pub document_revision: i32,
    /// The splitter's offset map.
    pub source_map: Option<entity::SourceMap>,
}

impl QuoteRecord {
    /// `quote` of `passage` located in its document through `place` (its row, if it is
    /// still stored). None for evidence from before passages (no range to locate in).
    pub fn locate(quote: &PassageQuote, passage: &Passage, place: Option<&PassagePlace>) -> Option<Self> {
        let (passage_start, passage_end) = (passage.char_start?, passage.char_end?);
        let mapped =
            place.and_then(|place| place.source_map.as_ref()).and_then(|map| map.content_range(quote.start, quote.end));
        let (char_start, char_end) = match mapped {
            Some((start, end)) => {
                let at = |offset: usize| {
                    passage_start
                        .saturating_add(i32::try_from(offset).unwrap_or(i32::MAX))
                        .clamp(passage_start, passage_end)
                };
                (at(start), at(end))
            }
            None => (passage_start, passage_end),
        };
        Some(Self {
            text: quote.text.clone(),
            char_start,
            char_end,
            page_start: passage.provenance.page_start,
            page_end: passage.provenance.page_end,
            document_revision: place.map(|place| place.document_revision),
        })
    }
}

/// The citations of a trace with `answer`: those recorded with it (`recorded`, the JSON
/// array of its citation check row), else those of an answer from before citations were
/// recorded ([`legacy_citations`]).
pub fn of_trace(answer: &str, recorded: Option<&serde_json::Value>) -> Vec<CitationRecord> {
    recorded
        .filter(|value| !value.is_null())
        .and_then(|value| serde_json::from_value(value.clone()).ok())
        .unwrap_or_else(|| legacy_citations(answer))
}

/// The citations of an answer from before citations were recorded: each citation mark of
/// each sentence of `answer`, with no verdict and no quote.
pub fn legacy_citations(answer: &str) -> Vec<CitationRecord> {
    grounding::sentences(answer)
        .into_iter()
        .flat_map(|sentence| {
            let text = sentence.text;
            sentence.citations.into_iter().map(move |n| CitationRecord {
                n,
                sentence: text.clone(),
                verdict: None,
                quote: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::research::grounding::{Sources, ground};

    fn passage(text: &str, char_start: i32) -> Passage {
        Passage {
            text: text.to_owned(),
            char_start: Some(char_start),
            char_end: Some(char_start + i32::try_from(text.chars().count()).unwrap_or(0)),
            passage_id: Some(uuid::Uuid::nil()),
            ..Passage::default()
        }
    }

    #[test]
    fn each_citation_quotes_the_passage_sentence_that_supports_it() {
        let evidence =
            [passage("Streams move data. The default <b>highWaterMark</b> is 16384 bytes. Other things happen.", 100)];
        let readable: Vec<String> = evidence.iter().map(Passage::readable_text).collect();
        let texts: Vec<&str> = readable.iter().map(String::as_str).collect();
        let sources = Sources { texts: &texts, labels: &[], question: "" };
        let grounded = ground("The default highWaterMark is 16384 bytes [1].", &sources, &[0]).expect("supported");
        let stored: Vec<&str> = evidence.iter().map(Passage::stored_text).collect();
        let citations = answer_citations(&grounded.sentences, &grounded.cited, &stored);
        assert_eq!(citations.len(), 1);
        let quote = citations[0].quote.clone().expect("a quote");
        assert_eq!(quote.text, "The default highWaterMark is 16384 bytes.");
        let stored: String = evidence[0].text.chars().skip(quote.start).take(quote.end - quote.start).collect();
        assert_eq!(stored, "The default <b>highWaterMark</b> is 16384 bytes.");
        // Without an offset map the quote spans its passage; with one, exactly its words.
        let located = QuoteRecord::locate(&quote, &evidence[0], None).expect("located");
        assert_eq!((located.char_start, located.char_end, located.document_revision), (100, 188, None));
        let identity = entity::SourceMap::from_chars((0..88u32).map(|at| Some((at, at + 1))));
        let place = PassagePlace { document_revision: 3, source_map: Some(identity) };
        let located = QuoteRecord::locate(&quote, &evidence[0], Some(&place)).expect("located");
        assert_eq!((located.char_start, located.char_end, located.document_revision), (119, 167, Some(3)));
    }

    #[test]
    fn legacy_answers_list_their_marks_without_verdicts() {
        let citations = legacy_citations("Tides follow the moon [1][2]. Bees make honey [2].");
        let marks: Vec<(usize, &str)> = citations.iter().map(|c| (c.n, c.sentence.as_str())).collect();
        assert_eq!(
            marks,
            [(1, "Tides follow the moon [1][2]."), (2, "Tides follow the moon [1][2]."), (2, "Bees make honey [2].")]
        );
        assert!(citations.iter().all(|c| c.verdict.is_none() && c.quote.is_none()));
    }
}
