//! Plain text: paragraphs are runs of lines between blank lines, and a paragraph's text is
//! exactly its slice of the source.
use super::block::{Block, Emit};

/// Hands each paragraph of `content` to `emit`, in order, until it says stop.
pub(super) fn blocks(content: &str, emit: &mut Emit<'_>) {
    let mut start: Option<usize> = None;
    let mut end = 0;
    let mut at = 0;
    for line in content.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            if let Some(from) = start.take()
                && !emit(paragraph(content, from, end))
            {
                return;
            }
        } else {
            let leading = line.len() - line.trim_start().len();
            start.get_or_insert(at + leading);
            end = at + line.trim_end().len();
        }
        at += line.len();
    }
    if let Some(from) = start {
        emit(paragraph(content, from, end));
    }
}

fn paragraph(content: &str, start: usize, end: usize) -> Block {
    let mut block = Block { source: start..end, ..Block::default() };
    block.push(&content[start..end], start..end);
    block
}
