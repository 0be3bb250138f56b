//! A PDF's text as pages: the pages are joined by [`PAGE_BREAK`] in the document's
//! content, and each page is split on its own, so a passage never runs from one page into
//! the next and every passage knows its page.
use entity::MediaType;

use super::chunk::{Chunk, ChunkSettings, TooManyPassages, chunk};

/// What joins a PDF's pages in its text: a line holding only a form feed, which splitting
/// sees as a paragraph break.
pub const PAGE_BREAK: &str = "\n\u{c}\n";

/// Where each page of `text` starts, in Unicode code points: the first at 0, each next
/// one after a [`PAGE_BREAK`].
pub fn page_starts(text: &str) -> Vec<usize> {
    let mut starts = vec![0];
    let break_chars = PAGE_BREAK.chars().count();
    let mut chars = 0;
    for page in text.split(PAGE_BREAK) {
        chars += page.chars().count() + break_chars;
        starts.push(chars);
    }
    starts.pop();
    starts
}

/// Splits a paged text (plain text, pages joined by [`PAGE_BREAK`]) page by page: each
/// passage's character range indexes the whole text and its pages are the one it is on.
/// The passage limit counts the whole document.
pub fn chunk_pages(text: &str, settings: &ChunkSettings) -> Result<Vec<Chunk>, TooManyPassages> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let starts = page_starts(text);
    for (index, page) in text.split(PAGE_BREAK).enumerate() {
        let left = settings.max_passages.saturating_sub(chunks.len());
        let page_settings = ChunkSettings { max_passages: left, ..*settings };
        let pieces = chunk(page, MediaType::TextPlain, &page_settings)
            .map_err(|_| TooManyPassages { limit: settings.max_passages })?;
        let offset = starts[index];
        let number = i32::try_from(index + 1).unwrap_or(i32::MAX);
        for piece in pieces {
            chunks.push(Chunk {
                ordinal: i32::try_from(chunks.len()).unwrap_or(i32::MAX),
                char_start: piece.char_start + offset,
                char_end: piece.char_end + offset,
                pages: Some((number, number)),
                ..piece
            });
        }
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_starts_follow_the_breaks() {
        let text = format!("één{PAGE_BREAK}two{PAGE_BREAK}three");
        let starts = page_starts(&text);
        assert_eq!(starts.len(), 3);
        let chars: Vec<char> = text.chars().collect();
        assert_eq!(chars[starts[1]..starts[1] + 3].iter().collect::<String>(), "two");
        assert_eq!(chars[starts[2]..].iter().collect::<String>(), "three");
    }

    #[test]
    fn every_passage_stays_on_its_page() {
        let text = format!("Tides rise.\n\nMoon pulls.{PAGE_BREAK}Neap tides are weak.");
        let chunks = chunk_pages(&text, &ChunkSettings::default()).expect("chunks");
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert_eq!(chunks[0].pages, Some((1, 1)));
        assert_eq!(chunks[1].pages, Some((2, 2)));
        assert_eq!(chunks[1].ordinal, 1);
        let chars: Vec<char> = text.chars().collect();
        let shown: String = chars[chunks[1].char_start..chunks[1].char_end].iter().collect();
        assert_eq!(shown, "Neap tides are weak.");
    }

    #[test]
    fn the_passage_limit_counts_the_whole_document() {
        let text = format!("One.{PAGE_BREAK}Two.{PAGE_BREAK}Three.");
        let settings = ChunkSettings { max_passages: 2, ..ChunkSettings::default() };
        assert_eq!(chunk_pages(&text, &settings), Err(TooManyPassages { limit: 2 }));
    }
}
