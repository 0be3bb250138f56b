//! Markdown (CommonMark, with tables): a block is a top-level paragraph, list item, code
//! block, block quote, table or HTML block, with everything nested in it; headings set the
//! heading path of the blocks after them. pulldown-cmark's offset iterator gives each
//! element's source range and each piece of text's.
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use super::block::{Block, Emit, heading_text};

/// Hands each block of `content` to `emit`, in order, until it says stop.
pub(super) fn blocks(content: &str, emit: &mut Emit<'_>) {
    let mut headings: Vec<(usize, String)> = Vec::new();
    let mut current: Option<Block> = None;
    // How deep inside the current block's element the parser is.
    let mut depth = 0usize;
    for (event, range) in Parser::new_ext(content, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(tag) => {
                if current.is_some() {
                    depth += 1;
                    if matches!(tag, Tag::Paragraph | Tag::Item | Tag::TableCell | Tag::CodeBlock(_)) {
                        separate(current.as_mut());
                    }
                    continue;
                }
                if !is_block(&tag) {
                    continue;
                }
                let heading = match tag {
                    Tag::Heading { level, .. } => Some(level as usize),
                    _ => None,
                };
                let paths = headings.iter().map(|(_, text)| text.clone()).collect();
                current = Some(Block { source: range, headings: paths, heading, ..Block::default() });
            }
            Event::End(end) => {
                if depth > 0 {
                    depth -= 1;
                    if matches!(end, TagEnd::TableCell)
                        && let Some(block) = current.as_mut()
                    {
                        block.text.push_str(" | ");
                    }
                    continue;
                }
                let Some(mut block) = current.take() else { continue };
                // pulldown-cmark's range of a block runs on over its trailing line break.
                let kept = content[block.source.clone()].trim_end().len();
                block.source.end = block.source.start + kept;
                if let Some(level) = block.heading {
                    headings.retain(|(outer, _)| *outer < level);
                    headings.push((level, heading_text(&block.text)));
                }
                if !emit(block) {
                    return;
                }
            }
            Event::Text(text) | Event::Code(text) | Event::Html(text) | Event::InlineHtml(text) => {
                if let Some(block) = current.as_mut() {
                    block.push(&text, range);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(block) = current.as_mut() {
                    block.text.push(' ');
                }
            }
            _ => {}
        }
    }
}

/// The elements that make a block of their own at the top level.
fn is_block(tag: &Tag<'_>) -> bool {
    // A list is not a block itself: its items are, each with its nested lists.
    matches!(
        tag,
        Tag::Paragraph
            | Tag::Heading { .. }
            | Tag::BlockQuote(_)
            | Tag::CodeBlock(_)
            | Tag::HtmlBlock
            | Tag::Item
            | Tag::Table(_)
            | Tag::FootnoteDefinition(_)
    )
}

/// Keeps nested paragraphs and items apart in the block's text.
fn separate(block: Option<&mut Block>) {
    if let Some(block) = block
        && !block.text.is_empty()
        && !block.text.ends_with(char::is_whitespace)
    {
        block.text.push(' ');
    }
}
