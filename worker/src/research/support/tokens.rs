//! The support check's tokenizer. It reads the raw text itself, so what a sentence states
//! exactly stays whole: `isn't` is one word (and a negation), `16,384` one number,
//! `fs.readFile`, `max_old_space_size` and `highWaterMark` one identifier each, `v15.0.0`
//! one version, `'latin1'` a quoted string. (`knowledge::search::search_terms`, which
//! builds full-text queries, is a different tokenizer and does not change.)
//!
//! Each token keeps its place in the text (code points), so a quote can be cut from it.

/// One token of a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// What it is.
    pub kind: Kind,
    /// Where it starts in the text, in code points.
    pub start: usize,
    /// Where it ends (exclusive).
    pub end: usize,
}

/// What a token is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A word, lower-cased, possessive folded (`moon's` → `moon`), contraction kept whole
    /// (`isn't`).
    Word(String),
    /// A number as written without its thousands separators (`16,384` → `16384`), with the
    /// unit written right after it, if it is one ([`unit`]).
    Number {
        /// The digits (and decimal point).
        value: String,
        /// The unit's canonical name.
        unit: Option<&'static str>,
    },
    /// A version (`v15.0.0`, `1.2.3`), without a leading `v`.
    Version(String),
    /// A code identifier as written: a dotted name (`fs.readFile`), `snake_case` or
    /// `camelCase` (`highWaterMark`).
    Identifier(String),
    /// The text between quotes (`'latin1'` → `latin1`).
    Quoted(String),
}

/// `text`'s tokens, in order. A quoted string is a token of its own and its words are
/// tokens too.
pub fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = quoted(&chars);
    let mut at = 0;
    while at < chars.len() {
        if !chars[at].is_alphanumeric() {
            at += 1;
            continue;
        }
        let start = at;
        while at < chars.len() && (is_inner(chars[at]) || joins(&chars, at)) {
            at += 1;
        }
        let raw: String = chars[start..at].iter().collect();
        if raw.contains('-') && !is_header_name(&raw) {
            // `well-known`, `12-inch`: each part a token of its own.
            let mut part_start = start;
            for part in raw.split('-') {
                let part_end = part_start + part.chars().count();
                if !part.is_empty() {
                    let (kind, _) = classify(part, &chars, part_end);
                    tokens.push(Token { kind, start: part_start, end: part_end });
                }
                part_start = part_end + 1;
            }
            continue;
        }
        let (kind, end) = classify(&raw, &chars, at);
        tokens.push(Token { kind, start, end: end.max(at) });
        at = end.max(at);
    }
    tokens.sort_by_key(|token| token.start);
    tokens
}

/// A character inside a token: letters, digits and `_`.
fn is_inner(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// Whether the punctuation at `at` joins the characters either side into one token: `.`
/// between letters or digits (`fs.readFile`, `0.5`), `,` between digits (`16,384`), an
/// apostrophe between letters (`isn't`, `moon's`), `-` between letters or digits (a
/// header name, `X-RateLimit-Reset`, stays one token; other hyphenated words are split
/// again into their parts).
fn joins(chars: &[char], at: usize) -> bool {
    let (Some(before), Some(after)) = (at.checked_sub(1).and_then(|index| chars.get(index)), chars.get(at + 1)) else {
        return false;
    };
    match chars[at] {
        '.' => is_inner(*before) && is_inner(*after),
        ',' => before.is_ascii_digit() && after.is_ascii_digit() && thousands_group(chars, at + 1),
        '\'' | '’' => before.is_alphabetic() && after.is_alphabetic(),
        '-' => before.is_alphanumeric() && after.is_alphanumeric(),
        _ => false,
    }
}

/// Whether three digits and then no digit start at `at` (a thousands group, not a list
/// `1,2`).
fn thousands_group(chars: &[char], at: usize) -> bool {
    chars.get(at..at + 3).is_some_and(|group| group.iter().all(char::is_ascii_digit))
        && !chars.get(at + 3).is_some_and(char::is_ascii_digit)
}

/// What the raw token `raw` (ending at `end`) is, and where it ends once a unit written
/// after it is taken in.
fn classify(raw: &str, chars: &[char], end: usize) -> (Kind, usize) {
    if let Some(version) = version(raw) {
        return (Kind::Version(version), end);
    }
    if let Some(value) = number(raw) {
        let (unit, end) = unit_after(chars, end);
        return (Kind::Number { value, unit }, end);
    }
    // `10ms`, `64KB`: a number with its unit in one.
    if let Some(split) = raw.find(|ch: char| !ch.is_ascii_digit() && ch != '.' && ch != ',')
        && split > 0
        && let (Some(value), Some(unit)) = (number(&raw[..split]), unit(&raw[split..]))
    {
        return (Kind::Number { value, unit: Some(unit) }, end);
    }
    if let Some(value) = ordinal(raw) {
        return (Kind::Number { value, unit: None }, end);
    }
    if is_identifier(raw) {
        return (Kind::Identifier(raw.to_owned()), end);
    }
    (Kind::Word(fold(raw)), end)
}

/// `raw` as a version, if it is one: `v` and a number with dots, or three or more dotted
/// parts of digits.
fn version(raw: &str) -> Option<String> {
    let (digits, prefixed) = match raw.strip_prefix(['v', 'V']) {
        Some(rest) => (rest, true),
        None => (raw, false),
    };
    let parts: Vec<&str> = digits.split('.').collect();
    let numeric = parts.iter().all(|part| !part.is_empty() && part.chars().all(|ch| ch.is_ascii_digit()));
    (numeric && (parts.len() >= 3 || prefixed)).then(|| digits.to_owned())
}

/// `raw` as a number (digits, thousands separators, one decimal point), separators out.
fn number(raw: &str) -> Option<String> {
    let plain: String = raw.chars().filter(|ch| *ch != ',').collect();
    let mut parts = plain.split('.');
    let whole = parts.next()?;
    let fraction = parts.next();
    let digits = |part: &str| !part.is_empty() && part.chars().all(|ch| ch.is_ascii_digit());
    (digits(whole) && fraction.is_none_or(digits) && parts.next().is_none()).then_some(plain)
}

/// The unit written right after a number ending at `end` (`%`, or a unit word after at
/// most one space), and where the number with it ends.
fn unit_after(chars: &[char], end: usize) -> (Option<&'static str>, usize) {
    let start = if chars.get(end) == Some(&' ') { end + 1 } else { end };
    if chars.get(start) == Some(&'%') {
        return (Some("percent"), start + 1);
    }
    let mut stop = start;
    while stop < chars.len() && chars[stop].is_alphabetic() {
        stop += 1;
    }
    let word: String = chars[start..stop].iter().collect();
    match unit(&word) {
        Some(unit) if stop > start => (Some(unit), stop),
        _ => (None, end),
    }
}

/// The canonical name of a unit, if `word` names one.
pub fn unit(word: &str) -> Option<&'static str> {
    let lower = word.to_lowercase();
    Some(match lower.as_str() {
        "%" | "percent" | "per cent" => "percent",
        "ms" | "msec" | "millisecond" | "milliseconds" => "ms",
        "s" | "sec" | "secs" | "second" | "seconds" => "s",
        "min" | "mins" | "minute" | "minutes" => "min",
        "h" | "hr" | "hrs" | "hour" | "hours" => "h",
        "d" | "day" | "days" => "day",
        "week" | "weeks" => "week",
        "month" | "months" => "month",
        "year" | "years" => "year",
        "b" | "byte" | "bytes" => "byte",
        "kb" | "kib" | "kilobyte" | "kilobytes" => "kb",
        "mb" | "mib" | "megabyte" | "megabytes" => "mb",
        "gb" | "gib" | "gigabyte" | "gigabytes" => "gb",
        "tb" | "tib" | "terabyte" | "terabytes" => "tb",
        "m" | "metre" | "metres" | "meter" | "meters" => "m",
        "km" | "kilometre" | "kilometres" | "kilometer" | "kilometers" => "km",
        "cm" | "centimetre" | "centimetres" => "cm",
        "ft" | "foot" | "feet" => "ft",
        "usd" | "dollar" | "dollars" => "usd",
        "eur" | "euro" | "euros" => "eur",
        "°c" | "c" | "celsius" => "celsius",
        "°f" | "f" | "fahrenheit" => "fahrenheit",
        _ => return None,
    })
}

/// `raw` as an ordinal number (`99th`, `1st`): its digits.
fn ordinal(raw: &str) -> Option<String> {
    let split = raw.find(|ch: char| !ch.is_ascii_digit())?;
    let suffix = raw[split..].to_lowercase();
    (split > 0 && matches!(suffix.as_str(), "st" | "nd" | "rd" | "th")).then(|| raw[..split].to_owned())
}

/// Whether `raw` is a code identifier: a dotted name with a part of two letters or more
/// (`fs.readFile`, not `e.g`), `snake_case`, `camelCase` (starting lower-case:
/// `highWaterMark`, `pgBackRest`), a name of several capitalised humps
/// (`RedisLatencyHigh`; one hump, `PostgreSQL` or `JavaScript`, is a name, not code), or
/// letters and digits mixed (`SEV1`, `UN3481`, `4xx`), or a header name.
fn is_identifier(raw: &str) -> bool {
    let dotted =
        raw.contains('.') && raw.split('.').any(|part| part.chars().filter(|ch| ch.is_alphabetic()).count() >= 2);
    let snake = raw.trim_matches('_').contains('_');
    let chars: Vec<char> = raw.chars().collect();
    let humps = chars.windows(2).filter(|pair| pair[0].is_lowercase() && pair[1].is_uppercase()).count();
    let camel = humps > 0 && chars.first().is_some_and(|ch| ch.is_lowercase());
    let mixed = chars.iter().any(|ch| ch.is_alphabetic()) && chars.iter().any(char::is_ascii_digit);
    dotted || snake || camel || humps >= 2 || mixed || is_header_name(raw)
}

/// Whether a hyphenated `raw` is a header name: two parts or more, each capitalised
/// (`Retry-After`, `X-RateLimit-Reset`).
fn is_header_name(raw: &str) -> bool {
    let parts: Vec<&str> = raw.split('-').collect();
    parts.len() >= 2 && parts.iter().all(|part| part.chars().next().is_some_and(char::is_uppercase))
}

/// A word lower-cased, its possessive folded (`moon's`, `tides’` → `moon`, `tides`).
fn fold(raw: &str) -> String {
    let lower = raw.to_lowercase().replace('’', "'");
    match lower.strip_suffix("'s") {
        Some(stem) => stem.to_owned(),
        None => lower.trim_end_matches('\'').to_owned(),
    }
}

/// The quoted strings of `chars`: `'…'`, `"…"`, `` `…` ``, `‘…’` or `“…”`, opened at the start
/// or after a space or bracket, closed before a space, punctuation or the end, on one line,
/// at most 80 characters. An apostrophe inside a word (`isn't`) opens nothing.
fn quoted(chars: &[char]) -> Vec<Token> {
    let mut found = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let close = match chars[at] {
            '\'' => '\'',
            '"' => '"',
            '`' => '`',
            '‘' => '’',
            '“' => '”',
            _ => {
                at += 1;
                continue;
            }
        };
        let opens = at == 0 || chars[at - 1].is_whitespace() || matches!(chars[at - 1], '(' | '[' | '{' | ':' | '=');
        let end = chars[at + 1..]
            .iter()
            .take(81)
            .position(|ch| *ch == close || *ch == '\n')
            .map(|offset| at + 1 + offset)
            .filter(|end| chars[*end] == close);
        match end {
            Some(end) if opens && end > at + 1 && !chars[at + 1].is_whitespace() && !chars[end - 1].is_whitespace() => {
                let closes = chars.get(end + 1).is_none_or(|ch| !ch.is_alphanumeric());
                if closes {
                    let inner: String = chars[at + 1..end].iter().collect();
                    found.push(Token { kind: Kind::Quoted(inner), start: at, end: end + 1 });
                    at = end + 1;
                    continue;
                }
                at += 1;
            }
            _ => at += 1,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Kind> {
        tokenize(text).into_iter().map(|token| token.kind).collect()
    }

    fn word(text: &str) -> Kind {
        Kind::Word(text.to_owned())
    }

    #[test]
    fn what_a_sentence_states_exactly_stays_whole() {
        assert_eq!(
            kinds("The default highWaterMark isn't 16,384 bytes."),
            vec![
                word("the"),
                word("default"),
                Kind::Identifier("highWaterMark".into()),
                word("isn't"),
                Kind::Number { value: "16384".into(), unit: Some("byte") },
            ]
        );
        assert_eq!(
            kinds("Use fs.readFile() or max_old_space_size in v15.0.0."),
            vec![
                word("use"),
                Kind::Identifier("fs.readFile".into()),
                word("or"),
                Kind::Identifier("max_old_space_size".into()),
                word("in"),
                Kind::Version("15.0.0".into()),
            ]
        );
    }

    #[test]
    fn quotes_units_and_possessives() {
        let tokens = kinds("Set it to 'latin1' within 10ms, 5 % or 30 seconds; the moon's pull.");
        assert!(tokens.contains(&Kind::Quoted("latin1".into())));
        assert!(tokens.contains(&Kind::Identifier("latin1".into())));
        assert!(tokens.contains(&Kind::Number { value: "10".into(), unit: Some("ms") }));
        assert!(tokens.contains(&Kind::Number { value: "5".into(), unit: Some("percent") }));
        assert!(tokens.contains(&Kind::Number { value: "30".into(), unit: Some("s") }));
        assert!(tokens.contains(&word("moon")));
        // An apostrophe inside a word opens no quote.
        assert_eq!(kinds("it isn't 'x'").iter().filter(|kind| matches!(kind, Kind::Quoted(_))).count(), 1);
    }

    #[test]
    fn lists_abbreviations_and_decimals() {
        assert_eq!(
            kinds("1,2 e.g. 0.5"),
            vec![
                Kind::Number { value: "1".into(), unit: None },
                Kind::Number { value: "2".into(), unit: None },
                word("e.g"),
                Kind::Number { value: "0.5".into(), unit: None },
            ]
        );
        assert_eq!(kinds("v18")[0], Kind::Version("18".into()));
    }

    #[test]
    fn header_names_stay_whole_and_other_hyphenated_words_split() {
        assert_eq!(
            kinds("X-RateLimit-Refill is well-known"),
            vec![Kind::Identifier("X-RateLimit-Refill".into()), word("is"), word("well"), word("known")]
        );
        assert_eq!(
            kinds("the 99th SEV1")[1..],
            [Kind::Number { value: "99".into(), unit: None }, Kind::Identifier("SEV1".into())]
        );
    }

    #[test]
    fn places_are_code_points_of_the_text() {
        let text = "Café’s fs.readFile";
        let tokens = tokenize(text);
        let chars: Vec<char> = text.chars().collect();
        let last = tokens.last().map(|token| chars[token.start..token.end].iter().collect::<String>());
        assert_eq!(last.as_deref(), Some("fs.readFile"));
    }
}
