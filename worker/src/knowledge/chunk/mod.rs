//! Splitting a document into passages that respect its structure. Each format's parser
//! (`plain.rs`, `markdown.rs`, `html.rs`) turns the content into [`Block`]s: paragraphs,
//! list items, code blocks, table cells, headings, each with its text, where it sits in the
//! source and the headings above it. Packing then merges small consecutive blocks under
//! the same headings up to the target size, and splits a block that is too long at
//! sentence boundaries into windows that overlap. A passage's character range indexes the
//! stored `content` in Unicode code points, half-open: for whole blocks it spans their
//! markup; for a window of a long block it spans the window's own text.
mod block;
mod html;
mod markdown;
mod plain;

use std::ops::Range;

use entity::{MediaType, SourceMap};
use serde::Deserialize;
use unicode_segmentation::UnicodeSegmentation as _;

use self::block::{Block, Segment};
use crate::tokens::estimate_tokens;

/// How documents are split (`KFS_CHUNK_TARGET_TOKENS`, `KFS_CHUNK_OVERLAP_TOKENS`,
/// `KFS_CHUNK_MAX_PASSAGES`, `KFS_CHUNK_CONCURRENCY`, `KFS_CHUNK_WAIT_MS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ChunkSettings {
    /// The size a passage grows to, in estimated tokens (about four characters each).
    pub target_tokens: usize,
    /// How much consecutive windows of one long block share, in estimated tokens.
    pub overlap_tokens: usize,
    /// The most passages one document may split into; more is refused.
    pub max_passages: usize,
    /// Documents one process splits at once.
    pub concurrency: usize,
    /// How long a document waits for its turn to be split before the caller is told to
    /// come back later, in milliseconds.
    pub wait_ms: u64,
}

impl Default for ChunkSettings {
    fn default() -> Self {
        Self { target_tokens: 200, overlap_tokens: 40, max_passages: 20_000, concurrency: 2, wait_ms: 10_000 }
    }
}

impl ChunkSettings {
    /// The settings, or why they cannot work.
    pub fn validated(self) -> Result<Self, String> {
        if self.target_tokens < 16 {
            return Err(format!("chunk target_tokens must be at least 16, not {}", self.target_tokens));
        }
        if self.max_passages == 0 || self.concurrency == 0 {
            return Err("chunk max_passages and concurrency must be at least 1".to_owned());
        }
        if self.overlap_tokens * 2 > self.target_tokens {
            return Err(format!(
                "chunk overlap_tokens ({}) must be at most half of target_tokens ({})",
                self.overlap_tokens, self.target_tokens
            ));
        }
        Ok(self)
    }
}

pub use entity::Chunk;

/// A document that splits into more passages than `KFS_CHUNK_MAX_PASSAGES` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the content splits into more than {limit} passages, the most one document may hold (KFS_CHUNK_MAX_PASSAGES)")]
pub struct TooManyPassages {
    /// The limit.
    pub limit: usize,
}

/// Splits `content` into passages, or refuses it past `settings.max_passages`. Memory is
/// bounded by the passages, whatever the content's shape: the parsers hand each block to
/// the packer as they find it, so no list of every block (a million one-letter
/// paragraphs) is ever held, and splitting stops at the first passage over the limit.
pub fn chunk(content: &str, media: MediaType, settings: &ChunkSettings) -> Result<Vec<Chunk>, TooManyPassages> {
    let mut packer = Packer::new(content, settings);
    let mut emit = |block: Block| packer.add(block);
    match media {
        MediaType::TextPlain => plain::blocks(content, &mut emit),
        MediaType::TextMarkdown => markdown::blocks(content, &mut emit),
        MediaType::TextHtml => html::blocks(content, &mut emit),
    }
    packer.finish()
}

/// A passage being merged from blocks: its source byte range, headings, raw text (blocks
/// joined by a blank line) with where each piece came from, and its length in characters.
struct Merged {
    source: Range<usize>,
    headings: Vec<String>,
    text: String,
    segments: Vec<Segment>,
    chars: usize,
}

/// Merges small consecutive blocks under the same headings up to the target size and
/// splits large ones into windows, turning each passage into a [`Chunk`] as soon as it
/// is complete.
struct Packer<'a> {
    settings: &'a ChunkSettings,
    chars: CharIndex<'a>,
    /// The passage being merged.
    current: Option<Merged>,
    chunks: Vec<Chunk>,
    over: bool,
}

impl<'a> Packer<'a> {
    fn new(content: &'a str, settings: &'a ChunkSettings) -> Self {
        Self { settings, chars: CharIndex::new(content), current: None, chunks: Vec::new(), over: false }
    }

    /// Takes one block; false once the passages passed the limit.
    fn add(&mut self, block: Block) -> bool {
        if block.heading.is_some() || block.text.trim().is_empty() {
            return !self.over;
        }
        let block_chars = block.text.chars().count();
        let tokens = token_count_of(block_chars);
        if tokens > self.settings.target_tokens {
            self.flush();
            for window in windows(&block.text, self.settings) {
                let text = &block.text[window.clone()];
                let segments = segments_within(&block.segments, &window);
                self.emit(block.source_of(window), block.headings.clone(), text, &segments);
            }
            return !self.over;
        }
        match &mut self.current {
            // The merged text's size is kept as a running count of characters, not
            // counted again for every block that joins it.
            Some(merged)
                if merged.headings == block.headings
                    && token_count_of(merged.chars) + tokens <= self.settings.target_tokens =>
            {
                merged.source.end = block.source.end;
                merged.text.push_str("\n\n");
                let offset = merged.text.len();
                merged.text.push_str(&block.text);
                merged.segments.extend(block.segments.into_iter().map(|segment| Segment {
                    text: segment.text.start + offset..segment.text.end + offset,
                    source: segment.source,
                }));
                merged.chars += 2 + block_chars;
            }
            _ => {
                self.flush();
                self.current = Some(Merged {
                    source: block.source,
                    headings: block.headings,
                    text: block.text,
                    segments: block.segments,
                    chars: block_chars,
                });
            }
        }
        !self.over
    }

    fn flush(&mut self) {
        if let Some(merged) = self.current.take() {
            self.emit(merged.source, merged.headings, &merged.text, &merged.segments);
        }
    }

    /// Makes the passage a chunk (whitespace collapsed; an empty one is dropped), with
    /// where each character of its text came from (`segments`: pieces of `raw`).
    fn emit(&mut self, source: Range<usize>, heading_path: Vec<String>, raw: &str, segments: &[Segment]) {
        if self.over {
            return;
        }
        let (text, origins) = collapse_whitespace(raw);
        if text.is_empty() {
            return;
        }
        if self.chunks.len() >= self.settings.max_passages {
            self.over = true;
            return;
        }
        let char_start = self.chars.of(source.start);
        let source_map = self.source_map(char_start, &origins, segments);
        self.chunks.push(Chunk {
            ordinal: i32::try_from(self.chunks.len()).unwrap_or(i32::MAX),
            char_start,
            char_end: self.chars.of(source.end),
            heading_path,
            tokens: usize::try_from(estimate_tokens(&text)).unwrap_or(0),
            text,
            pages: None,
            source_map,
        });
    }

    /// The offset map of a passage starting at content character `char_start` whose
    /// characters came from `origins` (byte offsets into the raw text; `None` for a space
    /// standing for a run of whitespace), the raw text's pieces being `segments`.
    fn source_map(&mut self, char_start: usize, origins: &[Option<usize>], segments: &[Segment]) -> SourceMap {
        // Each segment's source range in characters, converted once, in order.
        let mut converted: Vec<Option<(usize, usize)>> = vec![None; segments.len()];
        let mut at = 0;
        let mut ranges = Vec::with_capacity(origins.len());
        for origin in origins {
            let Some(byte) = *origin else {
                ranges.push(None);
                continue;
            };
            if segments.get(at).is_none_or(|segment| segment.text.start > byte) {
                at = 0;
            }
            while segments.get(at).is_some_and(|segment| segment.text.end <= byte) {
                at += 1;
            }
            let Some(segment) = segments.get(at).filter(|segment| segment.text.start <= byte) else {
                ranges.push(None);
                continue;
            };
            let range = if segment.text.len() == segment.source.len() {
                // A copy of the source: the character's own place.
                let offset = self.chars.of(segment.source.start + (byte - segment.text.start));
                (offset, offset + 1)
            } else {
                *converted[at]
                    .get_or_insert_with(|| (self.chars.of(segment.source.start), self.chars.of(segment.source.end)))
            };
            let relative = |at: usize| u32::try_from(at.saturating_sub(char_start)).unwrap_or(u32::MAX);
            ranges.push(Some((relative(range.0), relative(range.1))));
        }
        SourceMap::from_chars(ranges)
    }

    fn finish(mut self) -> Result<Vec<Chunk>, TooManyPassages> {
        self.flush();
        if self.over { Err(TooManyPassages { limit: self.settings.max_passages }) } else { Ok(self.chunks) }
    }
}

/// Windows of about `target_tokens` over a long text, at sentence boundaries, each
/// starting with the last sentences (up to `overlap_tokens`) of the one before. A sentence
/// longer than a window is cut between words.
fn windows(text: &str, settings: &ChunkSettings) -> Vec<Range<usize>> {
    let mut pieces: Vec<Range<usize>> = Vec::new();
    for (start, sentence) in text.split_sentence_bound_indices() {
        if token_count(sentence) <= settings.target_tokens {
            pieces.push(start..start + sentence.len());
        } else {
            pieces.extend(
                cut(sentence, settings.target_tokens).into_iter().map(|piece| start + piece.start..start + piece.end),
            );
        }
    }
    let mut windows = Vec::new();
    let mut first = 0;
    while first < pieces.len() {
        let mut last = first;
        let mut tokens = token_count(&text[pieces[first].clone()]);
        while last + 1 < pieces.len() && tokens + token_count(&text[pieces[last + 1].clone()]) <= settings.target_tokens
        {
            last += 1;
            tokens += token_count(&text[pieces[last].clone()]);
        }
        windows.push(pieces[first].start..pieces[last].end);
        if last + 1 >= pieces.len() {
            break;
        }
        // The next window starts as far back as the overlap allows, but always moves on.
        let mut next = last + 1;
        let mut shared = 0;
        while next > first + 1 && shared + token_count(&text[pieces[next - 1].clone()]) <= settings.overlap_tokens {
            next -= 1;
            shared += token_count(&text[pieces[next].clone()]);
        }
        first = next;
    }
    windows
}

/// Pieces of at most `target_tokens` of one over-long sentence, cut after whitespace.
fn cut(sentence: &str, target_tokens: usize) -> Vec<Range<usize>> {
    let most = target_tokens.saturating_mul(4).max(1);
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < sentence.len() {
        let mut end = sentence.len();
        if sentence[start..].chars().count() > most {
            let limit = sentence[start..].char_indices().nth(most).map_or(sentence.len(), |(at, _)| start + at);
            end = sentence[start..limit]
                .rfind(char::is_whitespace)
                .map(|at| start + at + 1)
                .filter(|&at| at > start)
                .unwrap_or(limit);
        }
        pieces.push(start..end);
        start = end;
    }
    pieces
}

fn token_count(text: &str) -> usize {
    usize::try_from(estimate_tokens(text)).unwrap_or(usize::MAX)
}

/// [`token_count`] of a text of `chars` characters.
fn token_count_of(chars: usize) -> usize {
    chars.saturating_add(3) / 4
}

/// Runs of whitespace as one space, trimmed, with the byte offset in `text` each character
/// came from (`None` for a space standing for a run).
fn collapse_whitespace(text: &str) -> (String, Vec<Option<usize>>) {
    let mut collapsed = String::with_capacity(text.len());
    let mut origins = Vec::with_capacity(text.len());
    let mut space = false;
    for (at, ch) in text.char_indices() {
        if ch.is_whitespace() {
            space = !collapsed.is_empty();
            continue;
        }
        if space {
            collapsed.push(' ');
            origins.push(None);
            space = false;
        }
        collapsed.push(ch);
        origins.push(Some(at));
    }
    (collapsed, origins)
}

/// The pieces of `segments` inside the text range `window`, as offsets into the window's
/// text (a piece cut by the window keeps its exact place when it is a copy of the source,
/// and its whole source when it is not).
fn segments_within(segments: &[Segment], window: &Range<usize>) -> Vec<Segment> {
    segments
        .iter()
        .filter(|segment| segment.text.end > window.start && segment.text.start < window.end)
        .map(|segment| {
            let start = segment.text.start.max(window.start);
            let end = segment.text.end.min(window.end);
            let source = if segment.text.len() == segment.source.len() {
                segment.source.start + (start - segment.text.start)..segment.source.start + (end - segment.text.start)
            } else {
                segment.source.clone()
            };
            Segment { text: start - window.start..end - window.start, source }
        })
        .collect()
}

/// Byte offsets of one text as character offsets, for offsets asked in (mostly) rising
/// order: one walk over the text instead of a count from the start for each.
struct CharIndex<'a> {
    text: &'a str,
    byte: usize,
    chars: usize,
}

impl<'a> CharIndex<'a> {
    fn new(text: &'a str) -> Self {
        Self { text, byte: 0, chars: 0 }
    }

    fn of(&mut self, byte: usize) -> usize {
        let mut byte = byte.min(self.text.len());
        while !self.text.is_char_boundary(byte) {
            byte -= 1;
        }
        // Back or forth from the last offset asked: windows overlap, and a passage's map
        // reads its pieces after its end.
        if byte < self.byte {
            self.chars -= self.text[byte..self.byte].chars().count();
        } else {
            self.chars += self.text[self.byte..byte].chars().count();
        }
        self.byte = byte;
        self.chars
    }
}

#[cfg(test)]
mod tests;
