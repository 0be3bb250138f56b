//! A Word (Office Open XML) file's text, as Markdown: its body (`word/document.xml`) read as
//! a stream of XML events, paragraphs in order, a paragraph styled `Title` or `Heading N`
//! as a heading (so passages get heading paths), tables as Markdown tables.
//!
//! The body is decompressed as it is read, never held whole, and every cost is bounded and
//! linear in the file: the decompressed size ([`Bounds::max_unzipped`], so a ZIP bomb ends
//! as an error), any one run of text or one tag ([`MAX_TAG_BYTES`], the text limit for a
//! text run, so the parser's buffer stays small), the nesting ([`MAX_DEPTH`]), the text
//! gathered while it is read (`KFS_MAX_EXTRACTED_BYTES`, checked as each piece arrives,
//! not once a paragraph ends) and the time (`KFS_EXTRACT_TIMEOUT_MS`, checked as it goes,
//! since a thread of the blocking pool cannot be stopped from outside). Attributes are
//! read without quick-xml's duplicate check, which is quadratic in their number. Text keeps
//! only the characters XML allows (a `&#1;` reference is dropped).
use std::io::{BufReader, Cursor, Read};
use std::time::Instant;

use entity::MediaType;
use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use super::{Extracted, Unreadable};

/// The part of the archive that holds the document's body.
const BODY: &str = "word/document.xml";

/// The deepest element nesting a body may have (Word's own files nest a few dozen deep,
/// tables in tables included).
pub const MAX_DEPTH: usize = 256;

/// The longest tag (its name and attributes) a body may have.
pub const MAX_TAG_BYTES: usize = 1 << 20;

/// How many XML events are read between two looks at the clock.
const EVENTS_PER_CLOCK_CHECK: u32 = 4096;

/// What reading one Word file may cost.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// The most bytes the body may decompress to.
    pub max_unzipped: u64,
    /// The most text (UTF-8 bytes) the file may give.
    pub max_bytes: usize,
    /// When reading must have ended.
    pub deadline: Instant,
    /// The time allowed, in seconds, for the message when it runs out.
    pub timeout_seconds: u64,
}

/// Extracts the text of the Word file `bytes` within `bounds`.
pub(super) fn extract(bytes: &[u8], bounds: Bounds) -> Result<Extracted, Unreadable> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|_| {
        Unreadable("the file is damaged: it starts like a Word file but is not a readable ZIP archive".to_owned())
    })?;
    let body = archive.by_name(BODY).map_err(|_| {
        Unreadable("the file is a ZIP archive but not a Word document (it has no word/document.xml)".to_owned())
    })?;
    if body.size() > bounds.max_unzipped {
        return Err(bomb(bounds.max_unzipped));
    }
    let text = markdown_of(BufReader::new(body), bounds)?;
    if text.trim().is_empty() {
        return Err(Unreadable("the Word file holds no text".to_owned()));
    }
    Ok(Extracted { text, media_type: MediaType::TextMarkdown, page_count: None })
}

fn bomb(max_unzipped: u64) -> Unreadable {
    Unreadable(format!(
        "the Word file's body decompresses to more than {max_unzipped} bytes (KFS_EXTRACT_MAX_UNZIPPED_BYTES); it looks like a ZIP bomb"
    ))
}

fn too_much_text(max_bytes: usize) -> Unreadable {
    Unreadable(format!("the file's text is larger than {max_bytes} bytes (KFS_MAX_EXTRACTED_BYTES)"))
}

/// Why the [`Guarded`] reader stopped a body.
#[derive(Debug, Clone, Copy)]
enum Overrun {
    /// More bytes than `max_unzipped`.
    Unzipped,
    /// A tag longer than [`MAX_TAG_BYTES`].
    Tag,
    /// A run of text longer than the text limit.
    Text,
}

/// The decompressed body, read through a count of its bytes and of the current run
/// between markup delimiters (and references): quick-xml gathers a whole tag or text run into its buffer
/// before it hands the event over, so a run is refused while it is read, not once it is
/// in memory.
struct Guarded<R> {
    inner: R,
    read: u64,
    max_unzipped: u64,
    run: usize,
    in_tag: bool,
    max_text_run: usize,
    overrun: Option<Overrun>,
}

impl<R: Read> Read for Guarded<R> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buffer)?;
        self.read += read as u64;
        if self.read > self.max_unzipped {
            return Err(self.stop(Overrun::Unzipped));
        }
        for &byte in &buffer[..read] {
            match byte {
                b'<' => (self.in_tag, self.run) = (true, 0),
                b'>' => (self.in_tag, self.run) = (false, 0),
                // quick-xml hands a reference over as an event of its own.
                b'&' if !self.in_tag => self.run = 0,
                _ => self.run += 1,
            }
            if self.in_tag && self.run > MAX_TAG_BYTES {
                return Err(self.stop(Overrun::Tag));
            }
            if !self.in_tag && self.run > self.max_text_run {
                return Err(self.stop(Overrun::Text));
            }
        }
        Ok(read)
    }
}

impl<R> Guarded<R> {
    fn stop(&mut self, overrun: Overrun) -> std::io::Error {
        self.overrun = Some(overrun);
        std::io::Error::other("the Word file's body passed a bound")
    }
}

/// The body's paragraphs, headings and tables as Markdown.
fn markdown_of(body: impl Read, bounds: Bounds) -> Result<String, Unreadable> {
    let max_bytes = bounds.max_bytes;
    let guarded = Guarded {
        inner: body,
        read: 0,
        max_unzipped: bounds.max_unzipped,
        run: 0,
        in_tag: false,
        // A text event (references are events of their own) gives as many bytes as it has,
        // give or take whitespace.
        max_text_run: max_bytes.saturating_add(MAX_TAG_BYTES),
        overrun: None,
    };
    let mut reader = Reader::from_reader(BufReader::new(guarded));
    // Checking end names keeps every open element's name; the depth bound is ours.
    reader.config_mut().check_end_names = false;
    let mut out = Writer { text: String::new(), max_bytes };
    let mut paragraph = Paragraph::default();
    // Text gathered but not yet written (paragraphs, cells, rows of an open table).
    let mut gathered = 0usize;
    // Tables nest; the text of a nested table joins the cell it sits in.
    let mut tables: Vec<Vec<Vec<String>>> = Vec::new();
    let mut cell: Option<String> = None;
    let mut in_text = false;
    let mut depth = 0usize;
    let mut events = 0u32;
    let mut buffer = Vec::new();
    loop {
        events += 1;
        if events.is_multiple_of(EVENTS_PER_CLOCK_CHECK) && Instant::now() > bounds.deadline {
            return Err(Unreadable(format!(
                "reading the Word file took longer than {} s (KFS_EXTRACT_TIMEOUT_MS)",
                bounds.timeout_seconds
            )));
        }
        let event = match reader.read_event_into(&mut buffer) {
            Ok(event) => event,
            Err(_) => {
                return Err(match reader.get_ref().get_ref().overrun {
                    Some(Overrun::Unzipped) => bomb(bounds.max_unzipped),
                    Some(Overrun::Tag) => Unreadable(format!(
                        "the Word file's body has a tag longer than {MAX_TAG_BYTES} bytes; it is not a document Word writes"
                    )),
                    Some(Overrun::Text) => too_much_text(max_bytes),
                    None => Unreadable("the Word file is damaged: its body is not well-formed XML".to_owned()),
                });
            }
        };
        let before = paragraph.text.len();
        match event {
            Event::Start(element) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(Unreadable(format!(
                        "the Word file's body nests elements deeper than {MAX_DEPTH}; it is not a document Word writes"
                    )));
                }
                match element.local_name().as_ref() {
                    b"p" => paragraph = Paragraph::default(),
                    b"t" => in_text = true,
                    b"tbl" => tables.push(Vec::new()),
                    b"tr" if tables.len() == 1 => tables[0].push(Vec::new()),
                    b"tc" if tables.len() == 1 => cell = Some(String::new()),
                    b"pStyle" => paragraph.style(&element),
                    _ => {}
                }
            }
            Event::Empty(element) => match element.local_name().as_ref() {
                b"pStyle" => paragraph.style(&element),
                b"tab" | b"br" | b"cr" => push_text(&mut paragraph.text, " "),
                _ => {}
            },
            Event::Text(text) if in_text => {
                let decoded = text.xml_content().map_err(|_| damaged_text())?;
                push_text(&mut paragraph.text, &decoded);
            }
            Event::GeneralRef(reference) if in_text => {
                let name = reference.decode().map_err(|_| damaged_text())?;
                push_text(&mut paragraph.text, &entity(&name));
            }
            Event::End(element) => {
                depth = depth.saturating_sub(1);
                match element.local_name().as_ref() {
                    b"t" => in_text = false,
                    b"p" => {
                        let finished = std::mem::take(&mut paragraph);
                        match cell.as_mut() {
                            Some(cell) => {
                                if !cell.is_empty() && !finished.text.trim().is_empty() {
                                    cell.push(' ');
                                    gathered += 1;
                                }
                                cell.push_str(finished.text.trim());
                            }
                            None if tables.is_empty() => {
                                gathered = gathered.saturating_sub(finished.text.len());
                                out.paragraph(&finished)?;
                            }
                            None => gathered = gathered.saturating_sub(finished.text.len()),
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
                            gathered = 0;
                            out.table(&table)?;
                        }
                    }
                    _ => {}
                }
            }
            Event::Eof => break,
            _ => {}
        }
        gathered += paragraph.text.len().saturating_sub(before);
        if out.text.len().saturating_add(gathered) > max_bytes {
            return Err(too_much_text(max_bytes));
        }
        buffer.clear();
    }
    Ok(out.text)
}

/// Appends `text` as a paragraph keeps it: every run of whitespace one space (the
/// paragraph is written with its whitespace collapsed anyway, so a run of blanks costs
/// nothing), and only characters XML allows (a reference such as `&#1;` names one it does
/// not, and no reader of the document expects control characters).
fn push_text(target: &mut String, text: &str) {
    for character in text.chars() {
        if character.is_whitespace() {
            if !target.ends_with(' ') {
                target.push(' ');
            }
        } else if allowed_in_xml(character) {
            target.push(character);
        }
    }
}

/// Whether XML 1.0 allows `character` in a document (its `Char` production).
fn allowed_in_xml(character: char) -> bool {
    matches!(character, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
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
            .with_checks(false)
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
        let markdown = markdown_of(BODY_XML.as_bytes(), bounds(10_000)).expect("markdown");
        assert_eq!(
            markdown,
            "# Tides\n\nSun & moon pull\\*.\n\n| Tide | When |\n| --- | --- |\n| Spring | full moon |\n\n## 1. Neap"
        );
    }

    #[test]
    fn the_text_limit_holds() {
        assert!(markdown_of(BODY_XML.as_bytes(), bounds(10)).is_err());
    }

    fn bounds(max_bytes: usize) -> Bounds {
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        Bounds { max_unzipped: 1 << 30, max_bytes, deadline, timeout_seconds: 60 }
    }

    fn body(inner: &str) -> String {
        format!(r#"<w:document xmlns:w="x"><w:body>{inner}</w:body></w:document>"#)
    }

    #[test]
    fn a_style_with_many_attributes_costs_linear_time() {
        let attributes: String = (0..80_000).map(|index| format!(" a{index}=\"\"")).collect();
        let xml = body(&format!(
            r#"<w:p><w:pPr><w:pStyle{attributes} w:val="Title"/></w:pPr><w:r><w:t>Big</w:t></w:r></w:p>"#
        ));
        let started = Instant::now();
        assert_eq!(markdown_of(xml.as_bytes(), bounds(10_000)).expect("markdown"), "# Big");
        // Quadratic checks took minutes here; linear work takes well under a second.
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    }

    #[test]
    fn a_long_text_run_is_refused_while_it_is_read() {
        let xml = body(&format!("<w:p><w:r><w:t>{}</w:t></w:r></w:p>", "x".repeat(200_000)));
        let refused = markdown_of(xml.as_bytes(), bounds(1_000)).expect_err("refused");
        assert!(refused.0.contains("KFS_MAX_EXTRACTED_BYTES"), "{}", refused.0);
        // Many short runs of one paragraph add up to the same limit.
        let runs = "<w:r><w:t>word </w:t></w:r>".repeat(1_000);
        let refused = markdown_of(body(&format!("<w:p>{runs}</w:p>")).as_bytes(), bounds(1_000)).expect_err("refused");
        assert!(refused.0.contains("KFS_MAX_EXTRACTED_BYTES"), "{}", refused.0);
    }

    #[test]
    fn nesting_past_the_bound_is_refused() {
        let xml = body(&format!("{}{}", "<w:x>".repeat(MAX_DEPTH + 1), "</w:x>".repeat(MAX_DEPTH + 1)));
        let refused = markdown_of(xml.as_bytes(), bounds(1_000)).expect_err("refused");
        assert!(refused.0.contains("nests elements deeper"), "{}", refused.0);
        let shallow =
            body(&format!("{}<w:p><w:r><w:t>ok</w:t></w:r></w:p>{}", "<w:x>".repeat(100), "</w:x>".repeat(100)));
        assert_eq!(markdown_of(shallow.as_bytes(), bounds(1_000)).expect("markdown"), "ok");
    }

    #[test]
    fn characters_xml_forbids_are_dropped() {
        let xml = body("<w:p><w:r><w:t>a&#1;b&#x1F;c&#65;</w:t></w:r></w:p>");
        assert_eq!(markdown_of(xml.as_bytes(), bounds(1_000)).expect("markdown"), "abcA");
    }

    #[test]
    fn the_clock_is_read_while_reading() {
        let paragraphs = "<w:p><w:r><w:t>a</w:t></w:r></w:p>".repeat(10_000);
        let mut past = bounds(1 << 20);
        past.deadline = Instant::now();
        let refused = markdown_of(body(&paragraphs).as_bytes(), past).expect_err("refused");
        assert!(refused.0.contains("KFS_EXTRACT_TIMEOUT_MS"), "{}", refused.0);
    }

    #[test]
    fn the_decompressed_bound_holds_while_reading() {
        let mut small = bounds(1 << 20);
        small.max_unzipped = 100;
        let refused = markdown_of(BODY_XML.as_bytes(), small).expect_err("refused");
        assert!(refused.0.contains("ZIP bomb"), "{}", refused.0);
    }

    #[test]
    fn a_list_like_start_is_escaped() {
        assert_eq!(escape("1. one"), "1\\. one");
        assert_eq!(escape("- dash"), "\\- dash");
        assert_eq!(escape("plain 1. text"), "plain 1. text");
    }
}
