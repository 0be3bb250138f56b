//! A Word (Office Open XML) file's text, as Markdown: its body (`word/document.xml`) read as
//! a stream of XML events, paragraphs in order, a paragraph styled `Title` or `Heading N`
//! as a heading (so passages get heading paths), tables as Markdown tables. The body is
//! decompressed no further than a bound, whatever the archive claims, so a ZIP bomb ends
//! as an error instead of filling memory.
use std::io::{Cursor, Read as _};

use entity::MediaType;
use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use super::{Extracted, Unreadable};

/// The part of the archive that holds the document's body.
const BODY: &str = "word/document.xml";

/// Extracts the text of the Word file `bytes`, its body decompressed to at most
/// `max_unzipped` bytes, its text at most `max_bytes`.
pub(super) fn extract(bytes: &[u8], max_unzipped: u64, max_bytes: usize) -> Result<Extracted, Unreadable> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|_| {
        Unreadable("the file is damaged: it starts like a Word file but is not a readable ZIP archive".to_owned())
    })?;
    let mut body = archive.by_name(BODY).map_err(|_| {
        Unreadable("the file is a ZIP archive but not a Word document (it has no word/document.xml)".to_owned())
    })?;
    let bomb = || {
        Unreadable(format!(
            "the Word file's body decompresses to more than {max_unzipped} bytes (KFS_EXTRACT_MAX_UNZIPPED_BYTES); it looks like a ZIP bomb"
        ))
    };
    if body.size() > max_unzipped {
        return Err(bomb());
    }
    let mut xml = Vec::new();
    (&mut body)
        .take(max_unzipped.saturating_add(1))
        .read_to_end(&mut xml)
        .map_err(|_| Unreadable("the Word file is damaged: its body could not be decompressed".to_owned()))?;
    if xml.len() as u64 > max_unzipped {
        return Err(bomb());
    }
    let text = markdown_of(&xml, max_bytes)?;
    if text.trim().is_empty() {
        return Err(Unreadable("the Word file holds no text".to_owned()));
    }
    Ok(Extracted { text, media_type: MediaType::TextMarkdown, page_count: None })
}

/// The body's paragraphs, headings and tables as Markdown.
fn markdown_of(xml: &[u8], max_bytes: usize) -> Result<String, Unreadable> {
    let mut reader = Reader::from_reader(xml);
    let mut out = Writer { text: String::new(), max_bytes };
    let mut paragraph = Paragraph::default();
    // Tables nest; the text of a nested table joins the cell it sits in.
    let mut tables: Vec<Vec<Vec<String>>> = Vec::new();
    let mut cell: Option<String> = None;
    let mut in_text = false;
    let mut buffer = Vec::new();
    loop {
        let event = reader
            .read_event_into(&mut buffer)
            .map_err(|_| Unreadable("the Word file is damaged: its body is not well-formed XML".to_owned()))?;
        match event {
            Event::Start(element) => match element.local_name().as_ref() {
                b"p" => paragraph = Paragraph::default(),
                b"t" => in_text = true,
                b"tbl" => tables.push(Vec::new()),
                b"tr" if tables.len() == 1 => tables[0].push(Vec::new()),
                b"tc" if tables.len() == 1 => cell = Some(String::new()),
                b"pStyle" => paragraph.style(&element),
                _ => {}
            },
            Event::Empty(element) => match element.local_name().as_ref() {
                b"pStyle" => paragraph.style(&element),
                b"tab" | b"br" | b"cr" => paragraph.text.push(' '),
                _ => {}
            },
            Event::Text(text) if in_text => {
                let decoded = text.xml_content().map_err(|_| damaged_text())?;
                paragraph.text.push_str(&decoded);
            }
            Event::GeneralRef(reference) if in_text => {
                let name = reference.decode().map_err(|_| damaged_text())?;
                paragraph.text.push_str(&entity(&name));
            }
            Event::End(element) => match element.local_name().as_ref() {
                b"t" => in_text = false,
                b"p" => {
                    let finished = std::mem::take(&mut paragraph);
                    match cell.as_mut() {
                        Some(cell) => {
                            if !cell.is_empty() && !finished.text.trim().is_empty() {
                                cell.push(' ');
                            }
                            cell.push_str(finished.text.trim());
                        }
                        None if tables.is_empty() => out.paragraph(&finished)?,
                        None => {}
                    }
                }
                b"tc" if tables.len() == 1 => {
                    if let (Some(row), Some(text)) = (tables[0].last_mut(), cell.take()) {
                        row.push(text);
                    }
                }
                b"tbl" => {
                    if let Some(table) = tables.pop()
                        && tables.is_empty()
                    {
                        out.table(&table)?;
                    }
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
        buffer.clear();
    }
    Ok(out.text)
}

fn damaged_text() -> Unreadable {
    Unreadable("the Word file is damaged: its text is not valid".to_owned())
}

/// The five entities XML predefines, and numeric character references.
fn entity(name: &str) -> String {
    match name {
        "amp" => "&".to_owned(),
        "lt" => "<".to_owned(),
        "gt" => ">".to_owned(),
        "quot" => "\"".to_owned(),
        "apos" => "'".to_owned(),
        numeric => {
            let code = numeric
                .strip_prefix("#x")
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .or_else(|| numeric.strip_prefix('#').and_then(|decimal| decimal.parse().ok()));
            code.and_then(char::from_u32).map(String::from).unwrap_or_default()
        }
    }
}

/// One paragraph being read: its text and heading level (from its style).
#[derive(Debug, Default)]
struct Paragraph {
    text: String,
    heading: Option<usize>,
}

impl Paragraph {
    /// Reads a `w:pStyle`: `Title` is a first-level heading, `Heading1`…`Heading6` (also
    /// spelled with a space, as LibreOffice names them) their level.
    fn style(&mut self, element: &BytesStart<'_>) {
        let Some(value) = element
            .attributes()
            .flatten()
            .find(|attribute| attribute.key.local_name().as_ref() == b"val")
            .map(|attribute| String::from_utf8_lossy(&attribute.value).to_ascii_lowercase())
        else {
            return;
        };
        let value = value.replace(' ', "");
        self.heading = if value == "title" {
            Some(1)
        } else {
            value.strip_prefix("heading").and_then(|level| level.parse::<usize>().ok()).map(|level| level.clamp(1, 6))
        };
    }
}

/// The Markdown being written, refused past the text limit.
struct Writer {
    text: String,
    max_bytes: usize,
}

impl Writer {
    fn paragraph(&mut self, paragraph: &Paragraph) -> Result<(), Unreadable> {
        let text = paragraph.text.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.is_empty() {
            return Ok(());
        }
        let line = match paragraph.heading {
            Some(level) => format!("{} {}", "#".repeat(level), escape_inline(&text)),
            None => escape(&text),
        };
        self.block(&line)
    }

    fn table(&mut self, rows: &[Vec<String>]) -> Result<(), Unreadable> {
        let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
        if columns == 0 {
            return Ok(());
        }
        let mut table = String::new();
        for (index, row) in rows.iter().enumerate() {
            let cells: Vec<String> = (0..columns)
                .map(|column| row.get(column).map(|cell| escape_inline(cell)).unwrap_or_default())
                .collect();
            table.push_str(&format!("| {} |\n", cells.join(" | ")));
            if index == 0 {
                table.push_str(&format!("|{}\n", " --- |".repeat(columns)));
            }
        }
        self.block(table.trim_end())
    }

    fn block(&mut self, block: &str) -> Result<(), Unreadable> {
        if !self.text.is_empty() {
            self.text.push_str("\n\n");
        }
        self.text.push_str(block);
        if self.text.len() > self.max_bytes {
            return Err(Unreadable(format!(
                "the file's text is larger than {} bytes (KFS_MAX_EXTRACTED_BYTES)",
                self.max_bytes
            )));
        }
        Ok(())
    }
}

/// A paragraph as Markdown shows it literally: [`escape_inline`], and a start that would
/// begin a list or a setext heading escaped too.
fn escape(text: &str) -> String {
    let escaped = escape_inline(text);
    if escaped.starts_with(['-', '+', '=']) {
        return format!("\\{escaped}");
    }
    // "1." or "1)" at the start begins an ordered list: escape its delimiter.
    let digits = escaped.len() - escaped.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0 && escaped[digits..].starts_with(['.', ')']) {
        return format!("{}\\{}", &escaped[..digits], &escaped[digits..]);
    }
    escaped
}

/// The characters Markdown would read as markup, escaped with a backslash.
fn escape_inline(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        if matches!(character, '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '~' | '|') {
            escaped.push('\\');
        }
        escaped.push(character);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY_XML: &str = r#"<?xml version="1.0"?><w:document xmlns:w="x"><w:body>
        <w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Tides</w:t></w:r></w:p>
        <w:p><w:r><w:t xml:space="preserve">Sun &amp; moon </w:t></w:r><w:r><w:t>pull*.</w:t></w:r></w:p>
        <w:tbl><w:tr><w:tc><w:p><w:r><w:t>Tide</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>When</w:t></w:r></w:p></w:tc></w:tr>
        <w:tr><w:tc><w:p><w:r><w:t>Spring</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>full moon</w:t></w:r></w:p></w:tc></w:tr></w:tbl>
        <w:p><w:pPr><w:pStyle w:val="Heading 2"/></w:pPr><w:r><w:t>1. Neap</w:t></w:r></w:p>
        </w:body></w:document>"#;

    #[test]
    fn paragraphs_headings_and_tables_become_markdown() {
        let markdown = markdown_of(BODY_XML.as_bytes(), 10_000).expect("markdown");
        assert_eq!(
            markdown,
            "# Tides\n\nSun & moon pull\\*.\n\n| Tide | When |\n| --- | --- |\n| Spring | full moon |\n\n## 1. Neap"
        );
    }

    #[test]
    fn the_text_limit_holds() {
        assert!(markdown_of(BODY_XML.as_bytes(), 10).is_err());
    }

    #[test]
    fn a_list_like_start_is_escaped() {
        assert_eq!(escape("1. one"), "1\\. one");
        assert_eq!(escape("- dash"), "\\- dash");
        assert_eq!(escape("plain 1. text"), "plain 1. text");
    }
}
