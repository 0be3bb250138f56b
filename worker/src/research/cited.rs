//! The citations an engine reports with its answer: for each citation mark of the final
//! answer, the sentence as it stands, the verdict that kept it and the quote (the cited
//! passage's supporting sentence(s), found in its readable text and placed in its stored
//! text). `research::citations` locates them in the documents.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::research::grounding::{CitedSentence, Verdict};
use crate::research::readable::{Readable, readable};

/// A quote as the engine finds it: text and range in the passage's stored text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassageQuote {
    /// The supporting sentence(s) of the readable text, joined by a space.
    pub text: String,
    /// Where they start in the passage's stored text (code points).
    pub start: usize,
    /// Where they end (exclusive).
    pub end: usize,
}

/// One citation of an answer as its engine reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerCitation {
    /// The number the answer cites it by (`[n]` names the answer's n-th evidence item).
    pub n: usize,
    /// The sentence as it stands in the final answer.
    pub sentence: String,
    /// The verdict that kept the citation.
    pub verdict: Verdict,
    /// The quote; none when the sentence states nothing the passage was read for.
    pub quote: Option<PassageQuote>,
}

/// The citations of `sentences`, whose cites name items of `evidence` by index; `cited`
/// is the final numbering (`cited[n - 1]` is the index `[n]` names). A cite the numbering
/// lacks is left out. `evidence` holds the items' stored texts.
pub fn answer_citations(sentences: &[CitedSentence], cited: &[usize], evidence: &[&str]) -> Vec<AnswerCitation> {
    let mut out = Vec::new();
    // Each cited passage's readable text, read once however many sentences cite it.
    let mut read: HashMap<usize, (Readable, Vec<char>)> = HashMap::new();
    for sentence in sentences {
        for cite in &sentence.cites {
            let Some(position) = cited.iter().position(|&index| index == cite.index) else { continue };
            let quote = evidence.get(cite.index).and_then(|stored| {
                let (readable, chars) = read.entry(cite.index).or_insert_with(|| {
                    let readable = readable(stored);
                    let chars = readable.text.chars().collect();
                    (readable, chars)
                });
                passage_quote(readable, chars, &cite.quote)
            });
            out.push(AnswerCitation { n: position + 1, sentence: sentence.text.clone(), verdict: cite.verdict, quote });
        }
    }
    out
}

/// The quote made of `ranges` of a passage's readable text (`chars`, its characters).
fn passage_quote(readable: &Readable, chars: &[char], ranges: &[(usize, usize)]) -> Option<PassageQuote> {
    let first = ranges.first()?.0;
    let last = ranges.last()?.1;
    let text = ranges
        .iter()
        .filter_map(|&(start, end)| chars.get(start..end.min(chars.len())))
        .map(|piece| piece.iter().collect::<String>().trim().to_owned())
        .filter(|piece| !piece.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let (start, end) = readable.source_range(first, last)?;
    Some(PassageQuote { text, start, end })
}
