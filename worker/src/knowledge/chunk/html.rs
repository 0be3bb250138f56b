//! HTML: a block is a leaf block element (a paragraph, list item, heading, preformatted
//! text, block quote, table cell, definition, caption) with everything nested in it, or a
//! run of text that sits directly in a container (`<div>text</div>`). A block's source
//! range spans its markup, from its start tag to its end tag; its text is what html5gum
//! decodes from the text tokens in between. Scripts, styles and templates are not text;
//! headings set the heading path of the blocks after them.
use html5gum::{DefaultEmitter, Token, Tokenizer};

use super::block::{Block, Emit, heading_text};

/// Elements that are blocks of their own.
const LEAVES: &[&[u8]] = &[
    b"p",
    b"li",
    b"h1",
    b"h2",
    b"h3",
    b"h4",
    b"h5",
    b"h6",
    b"pre",
    b"blockquote",
    b"td",
    b"th",
    b"dt",
    b"dd",
    b"figcaption",
    b"caption",
    b"address",
    b"summary",
    b"legend",
];
/// Leaves that a start tag of the same kind closes when their end tag is missing.
const SELF_CLOSING_SIBLINGS: &[&[u8]] = &[b"p", b"li", b"td", b"th", b"dt", b"dd"];
/// Elements whose content is not text.
const SKIPPED: &[&[u8]] =
    &[b"script", b"style", b"template", b"noscript", b"head", b"svg", b"math", b"iframe", b"object"];
/// Containers whose tags end a run of loose text (and a leaf whose end tag is missing).
const CONTAINERS: &[&[u8]] = &[
    b"html",
    b"body",
    b"div",
    b"section",
    b"article",
    b"main",
    b"header",
    b"footer",
    b"aside",
    b"nav",
    b"form",
    b"ul",
    b"ol",
    b"dl",
    b"table",
    b"thead",
    b"tbody",
    b"tfoot",
    b"tr",
    b"figure",
    b"details",
    b"fieldset",
    b"hr",
];

/// The leaf being read: its element, and how many elements of the same name are open
/// inside it (so the right end tag closes it).
struct Open {
    tag: Vec<u8>,
    nested: usize,
    block: Block,
}

/// Hands each block of `content` to `emit`, in order, until it says stop.
pub(super) fn blocks(content: &str, emit: &mut Emit<'_>) {
    let mut emitter = DefaultEmitter::<usize>::new_with_span();
    // Script and style content is raw text to the tokenizer, as to a browser.
    emitter.naively_switch_states(true);
    let mut out = Out { emit, stopped: false };
    let blocks = &mut out;
    let mut headings: Vec<(usize, String)> = Vec::new();
    let mut leaf: Option<Open> = None;
    let mut loose: Option<Block> = None;
    let mut skipping = 0usize;
    let path = |headings: &[(usize, String)]| headings.iter().map(|(_, text)| text.clone()).collect::<Vec<_>>();
    for token in Tokenizer::new_with_emitter(content, emitter) {
        if blocks.stopped {
            return;
        }
        let Ok(token) = token;
        match token {
            Token::StartTag(tag) => {
                let name = tag.name.to_ascii_lowercase();
                if SKIPPED.contains(&name.as_slice()) {
                    if !tag.self_closing {
                        skipping += 1;
                    }
                    continue;
                }
                if name == b"br" {
                    if let Some(block) = leaf.as_mut().map(|open| &mut open.block).or(loose.as_mut()) {
                        block.text.push('\n');
                    }
                    continue;
                }
                let is_leaf = LEAVES.contains(&name.as_slice());
                if is_leaf || CONTAINERS.contains(&name.as_slice()) {
                    finish_loose(&mut loose, blocks);
                }
                if !is_leaf {
                    continue;
                }
                if let Some(open) = leaf.as_mut() {
                    let sibling = open.tag == name && SELF_CLOSING_SIBLINGS.contains(&name.as_slice());
                    if !sibling && heading_level(&name).is_none() {
                        open.nested += usize::from(open.tag == name);
                        open.block.text.push(' ');
                        continue;
                    }
                    finish_leaf(&mut leaf, tag.span.start, &mut headings, blocks);
                }
                let block = Block {
                    source: tag.span.start..tag.span.end,
                    headings: path(&headings),
                    heading: heading_level(&name),
                    ..Block::default()
                };
                leaf = Some(Open { tag: name, nested: 0, block });
            }
            Token::EndTag(tag) => {
                let name = tag.name.to_ascii_lowercase();
                if SKIPPED.contains(&name.as_slice()) {
                    skipping = skipping.saturating_sub(1);
                    continue;
                }
                if let Some(open) = leaf.as_mut() {
                    if open.tag == name {
                        if open.nested > 0 {
                            open.nested -= 1;
                            continue;
                        }
                        finish_leaf(&mut leaf, tag.span.end, &mut headings, blocks);
                        continue;
                    }
                    if CONTAINERS.contains(&name.as_slice()) {
                        finish_leaf(&mut leaf, tag.span.start, &mut headings, blocks);
                    }
                } else if CONTAINERS.contains(&name.as_slice()) {
                    finish_loose(&mut loose, blocks);
                }
            }
            Token::String(text) if skipping == 0 => {
                let decoded = String::from_utf8_lossy(&text.value);
                let span = text.span.start..text.span.end;
                if let Some(open) = leaf.as_mut() {
                    open.block.push(&decoded, span);
                } else if !decoded.trim().is_empty() || loose.is_some() {
                    let block = loose.get_or_insert_with(|| Block {
                        source: span.clone(),
                        headings: path(&headings),
                        ..Block::default()
                    });
                    block.push(&decoded, span);
                }
            }
            _ => {}
        }
    }
    finish_leaf(&mut leaf, content.len(), &mut headings, blocks);
    finish_loose(&mut loose, blocks);
}

/// Where finished blocks go, and whether the receiver said stop.
struct Out<'a, 'b> {
    emit: &'a mut Emit<'b>,
    stopped: bool,
}

impl Out<'_, '_> {
    fn push(&mut self, block: Block) {
        if !self.stopped && !(self.emit)(block) {
            self.stopped = true;
        }
    }
}

/// `h1`…`h6` as 1…6.
fn heading_level(name: &[u8]) -> Option<usize> {
    match name {
        [b'h', level @ b'1'..=b'6'] => Some(usize::from(level - b'0')),
        _ => None,
    }
}

/// Ends the open leaf at byte `end`; a heading becomes the path of what follows.
fn finish_leaf(leaf: &mut Option<Open>, end: usize, headings: &mut Vec<(usize, String)>, blocks: &mut Out<'_, '_>) {
    let Some(Open { mut block, .. }) = leaf.take() else { return };
    block.source.end = end.max(block.source.start);
    if let Some(level) = block.heading {
        headings.retain(|(outer, _)| *outer < level);
        headings.push((level, heading_text(&block.text)));
    }
    blocks.push(block);
}

/// Ends a run of loose text where the next tag starts (its range ends at its last text).
fn finish_loose(loose: &mut Option<Block>, blocks: &mut Out<'_, '_>) {
    if let Some(mut block) = loose.take() {
        if let Some(last) = block.segments.last() {
            block.source.end = last.source.end;
        }
        if !block.text.trim().is_empty() {
            blocks.push(block);
        }
    }
}
