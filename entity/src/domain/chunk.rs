//! A passage of a document as the splitter makes it and the store writes it.

/// One passage of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// 0, 1, 2… in document order.
    pub ordinal: i32,
    /// Where it starts in the content, in Unicode code points.
    pub char_start: usize,
    /// Where it ends (exclusive), in Unicode code points.
    pub char_end: usize,
    /// The headings above it, outermost first.
    pub heading_path: Vec<String>,
    /// Its text, whitespace collapsed (markup removed for HTML and Markdown).
    pub text: String,
    /// Its size in estimated tokens.
    pub tokens: usize,
    /// The first and last page (1-based, inclusive) it comes from, for a PDF's text
    /// (the worker's `knowledge::pages`); `None` for formats without pages.
    pub pages: Option<(i32, i32)>,
    /// Where each character of `text` came from in the content.
    pub source_map: super::SourceMap,
}
