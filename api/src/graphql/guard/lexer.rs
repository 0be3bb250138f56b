//! A single pass over the document's text that counts what the parser would recurse
//! over, before the parser runs: tokens, bracket nesting and top-level fragment
//! definitions. It is not a validator: text it cannot make sense of is left to the parser,
//! which rejects it. What matters is that its counts are never lower than what the parser
//! will see, so it skips exactly what the parser skips (strings, comments, ignored
//! characters) and nothing else.

/// What the scan found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scan {
    /// Tokens: punctuators, names, numbers and strings (a string is one token).
    pub tokens: usize,
    /// The deepest nesting of `{`, `(` and `[`.
    pub max_nesting: usize,
    /// `fragment` keywords outside any bracket: fragment definitions.
    pub fragments: usize,
    /// Whether the text holds a NUL character anywhere.
    pub has_nul: bool,
}

/// Scans `text`, stopping early once `max_tokens` or `max_nesting` is passed (the caller
/// rejects the document then, so counting further is wasted work).
pub fn scan(text: &str, max_tokens: usize, max_nesting: usize) -> Scan {
    let bytes = text.as_bytes();
    let mut scan = Scan { has_nul: bytes.contains(&0), ..Scan::default() };
    let mut depth = 0usize;
    let mut at = 0usize;
    while at < bytes.len() {
        if scan.tokens > max_tokens || scan.max_nesting > max_nesting {
            break;
        }
        let byte = bytes[at];
        match byte {
            // Ignored: white space, line terminators, commas.
            b' ' | b'\t' | b'\n' | b'\r' | b',' => at += 1,
            b'#' => at = line_end(bytes, at),
            b'"' => {
                scan.tokens += 1;
                at = if bytes[at..].starts_with(b"\"\"\"") {
                    block_string_end(bytes, at + 3)
                } else {
                    string_end(bytes, at + 1)
                };
            }
            b'{' | b'(' | b'[' => {
                scan.tokens += 1;
                depth += 1;
                scan.max_nesting = scan.max_nesting.max(depth);
                at += 1;
            }
            b'}' | b')' | b']' => {
                scan.tokens += 1;
                depth = depth.saturating_sub(1);
                at += 1;
            }
            b'_' | b'a'..=b'z' | b'A'..=b'Z' => {
                let end = name_end(bytes, at);
                if depth == 0 && &bytes[at..end] == b"fragment" {
                    scan.fragments += 1;
                }
                scan.tokens += 1;
                at = end;
            }
            b'-' | b'0'..=b'9' => {
                scan.tokens += 1;
                at = number_end(bytes, at + 1);
            }
            b'.' if bytes[at..].starts_with(b"...") => {
                scan.tokens += 1;
                at += 3;
            }
            // Any other byte is a punctuator or something the parser will refuse; one
            // token either way. Multi-byte characters count once per byte, which only
            // overcounts.
            _ => {
                scan.tokens += 1;
                at += 1;
            }
        }
    }
    scan
}

/// The index after the comment's line.
fn line_end(bytes: &[u8], from: usize) -> usize {
    bytes[from..].iter().position(|&b| b == b'\n' || b == b'\r').map_or(bytes.len(), |offset| from + offset)
}

/// The index after a `"…"` string that starts at `from` (just past the quote). A line
/// terminator ends it too: such a string is malformed and the parser stops there.
fn string_end(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return at + 1,
            b'\n' | b'\r' => return at,
            _ => at += 1,
        }
    }
    bytes.len()
}

/// The index after a `"""…"""` block string whose body starts at `from`; `\"""` escapes.
fn block_string_end(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() {
        if bytes[at..].starts_with(b"\\\"\"\"") {
            at += 4;
        } else if bytes[at..].starts_with(b"\"\"\"") {
            return at + 3;
        } else {
            at += 1;
        }
    }
    bytes.len()
}

fn name_end(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() && (bytes[at] == b'_' || bytes[at].is_ascii_alphanumeric()) {
        at += 1;
    }
    at
}

/// Digits, a fraction and an exponent, loosely: the parser checks the number's shape.
fn number_end(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || matches!(bytes[at], b'.' | b'+' | b'-')) {
        if bytes[at] == b'.' && bytes[at..].starts_with(b"...") {
            break;
        }
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(text: &str) -> Scan {
        scan(text, usize::MAX, usize::MAX)
    }

    #[test]
    fn brackets_inside_strings_and_comments_do_not_nest() {
        let scanned = full("query { a(x: \"{{{[[(\") # {{{{\n b(y: \"\"\"{{ \\\"\"\" {{\"\"\") }");
        assert_eq!(scanned.max_nesting, 2, "{scanned:?}");
    }

    #[test]
    fn an_escaped_quote_does_not_end_a_string() {
        let scanned = full(r#"{ a(x: "\" {{{{ ") }"#);
        assert_eq!(scanned.max_nesting, 2, "{scanned:?}");
    }

    #[test]
    fn only_top_level_fragment_keywords_are_definitions() {
        let scanned = full("query { fragment } fragment A on Query { x } fragment B on Query { fragment }");
        assert_eq!(scanned.fragments, 2);
    }

    #[test]
    fn tokens_are_counted_and_the_scan_stops_past_the_limit() {
        assert_eq!(full("{ a b ...F }").tokens, 6);
        assert_eq!(full("query($a: Int = -12.5e3) { x }").tokens, 12);
        let long = "{ a }".repeat(1_000);
        assert!(scan(&long, 10, 64).tokens <= 12);
    }

    #[test]
    fn nesting_counts_every_bracket_kind() {
        assert_eq!(full("{ a(x: [[{y: 1}]]) }").max_nesting, 5);
        assert_eq!(full(&"{a".repeat(100)).max_nesting, 100);
    }

    #[test]
    fn a_nul_anywhere_is_reported() {
        assert!(full("{ a(x: \"\0\") }").has_nul);
        assert!(!full("{ a }").has_nul);
    }
}
