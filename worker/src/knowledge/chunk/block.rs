//! What the parsers hand the packer: a block of a document's structure (a paragraph, a
//! heading, a list item), its text and where each piece of it came from in the source.
use std::ops::Range;

/// A piece of a block's text and the part of the source it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Segment {
    /// Byte range in the block's text.
    pub(super) text: Range<usize>,
    /// Byte range in the source.
    pub(super) source: Range<usize>,
}

/// A unit of a document's structure, as a parser found it.
#[derive(Debug, Clone, Default)]
pub(super) struct Block {
    /// Its byte range in the source, markup included.
    pub(super) source: Range<usize>,
    /// Its text.
    pub(super) text: String,
    /// Where each piece of `text` came from, in order.
    pub(super) segments: Vec<Segment>,
    /// The headings above it.
    pub(super) headings: Vec<String>,
    /// Whether it is a heading (which names what follows instead of being a passage).
    pub(super) heading: Option<usize>,
}

impl Block {
    /// Appends `text` that came from `source`.
    pub(super) fn push(&mut self, text: &str, source: Range<usize>) {
        let start = self.text.len();
        self.text.push_str(text);
        self.segments.push(Segment { text: start..self.text.len(), source });
    }

    /// The source byte range of a byte range of the text: exact where the text is a copy
    /// of the source, the enclosing piece's bounds where it is not (a decoded entity), and
    /// the nearest piece's bound for text the parser added between pieces (a space).
    pub(super) fn source_of(&self, text: Range<usize>) -> Range<usize> {
        let linear = |segment: &Segment| segment.text.len() == segment.source.len();
        // Segments are in text order: binary searches keep long blocks of many pieces
        // (a paragraph full of inline markup) linear overall.
        let first = self.segments.partition_point(|segment| segment.text.end <= text.start);
        let start = match self.segments.get(first) {
            Some(segment) if linear(segment) && text.start >= segment.text.start => {
                segment.source.start + (text.start - segment.text.start)
            }
            Some(segment) => segment.source.start,
            None => self.source.start,
        };
        let after_last = self.segments.partition_point(|segment| segment.text.start < text.end);
        let end = match after_last.checked_sub(1).and_then(|last| self.segments.get(last)) {
            Some(segment) if linear(segment) && text.end <= segment.text.end => {
                segment.source.start + (text.end - segment.text.start)
            }
            Some(segment) => segment.source.end,
            None => self.source.end,
        };
        start..end.max(start)
    }
}

/// What a parser hands each block to; `false` means stop (the document is refused).
pub(super) type Emit<'a> = dyn FnMut(Block) -> bool + 'a;

/// The longest heading kept in a heading path, in characters: a heading's text is copied
/// into every passage under it, so a megabyte "heading" must not be.
pub(super) const MAX_HEADING_CHARS: usize = 200;

/// A heading's text as a heading path holds it: whitespace collapsed, at most
/// [`MAX_HEADING_CHARS`].
pub(super) fn heading_text(text: &str) -> String {
    let mut collapsed = String::new();
    for word in text.split_whitespace() {
        if !collapsed.is_empty() {
            collapsed.push(' ');
        }
        collapsed.push_str(word);
        if collapsed.len() >= MAX_HEADING_CHARS * 4 {
            break;
        }
    }
    match collapsed.char_indices().nth(MAX_HEADING_CHARS) {
        Some((at, _)) => collapsed[..at].to_owned(),
        None => collapsed,
    }
}
