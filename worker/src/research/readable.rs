//! The readable text of a passage: what a model is shown, what an extractive answer quotes
//! and what an answer is checked against. A passage's stored text keeps whatever markup
//! its block held (an HTML comment inside Markdown, a raw tag, an image, a link's target);
//! a weak model copies it into its answer. Here it goes:
//!
//! - front matter (a `---` fenced block of `key: value` lines at the start),
//! - HTML comments (`<!--introduced_in=v0.10.0-->`), and `<script>` and `<style>` elements
//!   whole,
//! - tags (`<strong class="x">`, `</p>`, `<br/>`; their text stays),
//! - images (`![alt](src)`, whole), link targets (`[text](url)` and `[text][ref]` keep
//!   `text`), reference definitions (`[ref]: url` lines), autolinks (`<https://…>`),
//! - heading markers (`## `) and strong emphasis markers (`**`, `__`),
//! - the five common character entities (`&amp;`, `&lt;`, `&gt;`, `&quot;`, `&#39;`) and
//!   `&nbsp;`, decoded,
//!
//! and runs of spaces left behind become one. Every character of the readable text
//! remembers where it stood in the stored text ([`Readable::source`]), so a quote taken
//! from it maps back. The stored passage and its range do not change.

/// A passage's readable text, with where each of its characters came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readable {
    /// The text.
    pub text: String,
    /// For each character of `text` (in code points), its index in the stored text.
    source: Vec<usize>,
}

impl Readable {
    /// The stored text's range (code points, half-open) that the readable range
    /// `start..end` came from.
    pub fn source_range(&self, start: usize, end: usize) -> Option<(usize, usize)> {
        let first = *self.source.get(start)?;
        let last = *self.source.get(end.checked_sub(1)?)?;
        Some((first, last + 1))
    }
}

/// The readable text of `stored`.
pub fn readable(stored: &str) -> Readable {
    let chars: Vec<char> = stored.chars().collect();
    let mut out = Output::default();
    let mut at = front_matter_end(&chars).unwrap_or(0);
    let mut line_start = true;
    while at < chars.len() {
        let ch = chars[at];
        let rest = &chars[at..];
        if line_start {
            let skipped = heading_marker(rest).or_else(|| reference_definition(rest));
            line_start = false;
            if let Some(skip) = skipped {
                at += skip;
                continue;
            }
        }
        let next = match ch {
            // A comment stands where blocks meet (a passage joins its blocks with a space):
            // it ends the sentence before it.
            '<' if rest.starts_with(&['<', '!', '-', '-']) => markup_tag(rest).inspect(|_| out.push('\n', at)),
            '<' => markup_tag(rest),
            '!' if rest.get(1) == Some(&'[') => image(rest),
            '[' => link(rest).map(|(text_len, total)| {
                out.push_slice(&chars[at + 1..at + 1 + text_len], at + 1);
                total
            }),
            '*' | '_' if rest.get(1) == Some(&ch) => Some(2),
            '&' => entity(rest).map(|(decoded, len)| {
                out.push(decoded, at);
                len
            }),
            _ => None,
        };
        match next {
            Some(skip) => at += skip,
            None => {
                out.push(ch, at);
                line_start = ch == '\n';
                at += 1;
            }
        }
    }
    out.finish()
}

/// The readable text under construction.
#[derive(Default)]
struct Output {
    chars: Vec<char>,
    source: Vec<usize>,
}

impl Output {
    /// Appends `ch` (from `from`), keeping one space of a run and no empty line.
    fn push(&mut self, ch: char, from: usize) {
        let space = ch == ' ' || ch == '\t';
        if space && self.chars.last().is_none_or(|last| last.is_whitespace()) {
            return;
        }
        if ch == '\n' && self.chars.last().is_none_or(|last| *last == '\n') {
            return;
        }
        self.chars.push(if space { ' ' } else { ch });
        self.source.push(from);
    }

    fn push_slice(&mut self, chars: &[char], from: usize) {
        for (offset, ch) in chars.iter().enumerate() {
            self.push(*ch, from + offset);
        }
    }

    fn finish(mut self) -> Readable {
        // Spaces left at line ends and at the end.
        let mut index = 0;
        while index < self.chars.len() {
            let trailing = self.chars[index] == ' ' && self.chars.get(index + 1).is_none_or(|next| *next == '\n');
            if trailing {
                self.chars.remove(index);
                self.source.remove(index);
            } else {
                index += 1;
            }
        }
        Readable { text: self.chars.into_iter().collect(), source: self.source }
    }
}

/// Where front matter at the start ends: `---`, `key: value` lines, `---`.
fn front_matter_end(chars: &[char]) -> Option<usize> {
    let text: String = chars.iter().take(8_000).collect();
    let body = text.strip_prefix("---\n")?;
    let close = body.find("\n---")?;
    let fields = &body[..close];
    let all_fields =
        fields.lines().all(|line| line.trim().is_empty() || line.contains(':') || line.starts_with([' ', '-']));
    if !all_fields {
        return None;
    }
    let end_bytes = 4 + close + 4;
    let end = text[..end_bytes].chars().count();
    Some(if chars.get(end) == Some(&'\n') { end + 1 } else { end })
}

/// The length of a heading marker (`## `) at a line's start.
fn heading_marker(rest: &[char]) -> Option<usize> {
    let hashes = rest.iter().take_while(|ch| **ch == '#').count();
    ((1..=6).contains(&hashes) && rest.get(hashes) == Some(&' ')).then_some(hashes + 1)
}

/// The length of a reference definition line (`[ref]: https://…`), its line break included.
fn reference_definition(rest: &[char]) -> Option<usize> {
    if rest.first() != Some(&'[') {
        return None;
    }
    let close = rest.iter().take(200).position(|ch| *ch == ']' || *ch == '\n')?;
    if rest[close] != ']' || rest.get(close + 1) != Some(&':') {
        return None;
    }
    let line = rest.iter().position(|ch| *ch == '\n').map_or(rest.len(), |end| end + 1);
    Some(line)
}

/// The length of markup starting at `<`: a comment (to its end, or the text's), a
/// `<script>` or `<style>` element whole, a tag, or an autolink.
fn markup_tag(rest: &[char]) -> Option<usize> {
    let starts = |prefix: &str| prefix.chars().enumerate().all(|(index, ch)| rest.get(index) == Some(&ch));
    if starts("<!--") {
        let end = find(rest, "-->").map_or(rest.len(), |at| at + 3);
        return Some(end);
    }
    for element in ["script", "style"] {
        if starts_ignoring_case(rest, &format!("<{element}")) {
            // To its closing tag (any case), or the end of the text.
            let closing = format!("</{element}>");
            let length = closing.chars().count();
            let end = (0..rest.len()).find(|at| starts_ignoring_case(&rest[*at..], &closing));
            return Some(end.map_or(rest.len(), |at| at + length));
        }
    }
    let second = *rest.get(1)?;
    if !(second.is_ascii_alphabetic() || second == '/' || second == '!') {
        return None;
    }
    // A tag or an autolink ends at `>` on the same line, within reason.
    let end = rest.iter().take(1_000).position(|ch| *ch == '>' || *ch == '\n')?;
    (rest[end] == '>').then_some(end + 1)
}

/// The length of an image `![alt](src)` or `![alt][ref]`.
fn image(rest: &[char]) -> Option<usize> {
    link(&rest[1..]).map(|(_, total)| total + 1)
}

/// A link at `[`: the length of its text and of the whole (`[text](target)` or
/// `[text][ref]`); `None` for brackets that are not a link.
fn link(rest: &[char]) -> Option<(usize, usize)> {
    let close = rest.iter().take(500).position(|ch| *ch == ']' || *ch == '\n')?;
    if rest[close] != ']' {
        return None;
    }
    let (open, shut) = match rest.get(close + 1) {
        Some('(') => ('(', ')'),
        Some('[') => ('[', ']'),
        _ => return None,
    };
    let _ = open;
    let target = rest[close + 2..].iter().take(2_000).position(|ch| *ch == shut || *ch == '\n')?;
    (rest[close + 2 + target] == shut).then_some((close - 1, close + 2 + target + 1))
}

/// A character entity at `&`: the character and the entity's length.
fn entity(rest: &[char]) -> Option<(char, usize)> {
    for (name, ch) in [("&amp;", '&'), ("&lt;", '<'), ("&gt;", '>'), ("&quot;", '"'), ("&#39;", '\''), ("&nbsp;", ' ')]
    {
        if name.chars().enumerate().all(|(index, expected)| rest.get(index) == Some(&expected)) {
            return Some((ch, name.chars().count()));
        }
    }
    None
}

/// Whether `chars` starts with `prefix` (ASCII letters in any case).
fn starts_ignoring_case(chars: &[char], prefix: &str) -> bool {
    let mut chars = chars.iter();
    prefix.chars().all(|expected| chars.next().is_some_and(|ch| ch.eq_ignore_ascii_case(&expected)))
}

/// Where `needle` first starts in `haystack`, in characters.
fn find(haystack: &[char], needle: &str) -> Option<usize> {
    let needle: Vec<char> = needle.chars().collect();
    haystack.windows(needle.len()).position(|window| window == needle.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_goes_and_its_text_stays() {
        let stored = "<!--introduced_in=v0.10.0--> Stability: 2 - Stable <!--name=vm-->\n\
                      The <strong class=\"x\">vm</strong> module runs code; see [the docs](https://nodejs.org/vm) \
                      and ![diagram](vm.png) **now** &amp; later.";
        let text = readable(stored).text;
        assert_eq!(text, "Stability: 2 - Stable\nThe vm module runs code; see the docs and now & later.");
        // Comments between blocks joined by spaces end the sentence before them.
        let joined = readable("Stable <!-- source_link=lib/vm.js --> The vm module runs code.").text;
        assert_eq!(joined, "Stable\nThe vm module runs code.");
        // Scripts and styles go whole, their closing tag in any case; text whose lower case
        // is longer (`İ`) does not shift what follows.
        let scripted = readable("İ <SCRIPT>var x = '<b>';</Script> stays <style>p{}</STYLE>.").text;
        assert_eq!(scripted, "İ stays .");
    }

    #[test]
    fn front_matter_headings_and_definitions_go() {
        let stored = "---\ntitle: Streams\ntags: [node]\n---\n## Buffering\nThe highWaterMark is 16384.\n[ref]: https://example.com\nEnd.";
        assert_eq!(readable(stored).text, "Buffering\nThe highWaterMark is 16384.\nEnd.");
    }

    #[test]
    fn each_character_knows_where_it_stood() {
        let stored = "a <b>bold</b> word";
        let clean = readable(stored);
        assert_eq!(clean.text, "a bold word");
        let start = clean.text.find("bold").expect("there");
        let (from, to) = clean.source_range(start, start + 4).expect("mapped");
        assert_eq!(stored.chars().skip(from).take(to - from).collect::<String>(), "bold");
    }

    #[test]
    fn prose_with_brackets_and_comparisons_stays() {
        let stored = "Use a < b and c > d; see [1] and arrays[0].";
        assert_eq!(readable(stored).text, stored);
    }
}
