//! The words of the support check: which are content (stop words are not), their stems
//! (Snowball English), negations, numbers written out, and the words that start a clause.
use std::sync::LazyLock;

use rust_stemmers::{Algorithm, Stemmer};

use super::tokens::Kind;

static ENGLISH: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// Words that say nothing a passage must hold: articles, auxiliaries, pronouns,
/// prepositions and connectives (negations are rule 3's, numbers written out rule 1's).
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "being", "both",
    "but", "by", "can", "could", "did", "do", "does", "doing", "each", "either", "for", "from", "had", "has", "have",
    "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself",
    "just", "may", "me", "might", "more", "most", "must", "my", "nor", "of", "on", "one", "only", "onto", "or",
    "other", "our", "ours", "shall", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs",
    "them", "then", "there", "these", "they", "this", "those", "through", "thus", "to", "too", "upon", "us", "very",
    "was", "we", "were", "what", "when", "where", "whether", "which", "while", "who", "whom", "whose", "why", "will",
    "with", "would", "you", "your", "yours",
];

/// Numbers written out, with their digits (`one` is left out: it is as often a pronoun).
const NUMBER_WORDS: &[(&str, &str)] = &[
    ("zero", "0"),
    ("two", "2"),
    ("three", "3"),
    ("four", "4"),
    ("five", "5"),
    ("six", "6"),
    ("seven", "7"),
    ("eight", "8"),
    ("nine", "9"),
    ("ten", "10"),
    ("eleven", "11"),
    ("twelve", "12"),
    ("thirteen", "13"),
    ("fourteen", "14"),
    ("fifteen", "15"),
    ("sixteen", "16"),
    ("seventeen", "17"),
    ("eighteen", "18"),
    ("nineteen", "19"),
    ("twenty", "20"),
    ("thirty", "30"),
    ("forty", "40"),
    ("fifty", "50"),
    ("sixty", "60"),
    ("seventy", "70"),
    ("eighty", "80"),
    ("ninety", "90"),
    ("hundred", "100"),
    ("twice", "2"),
    ("thrice", "3"),
];

/// Whether `word` (lower-cased) denies: `not`, `no`, `never`, `none`, `nothing`, `nobody`,
/// `neither` (its `nor` continues it), `nowhere`, `cannot`, `without`, `non`, a contraction with `n't`, a
/// word of lacking (`lack`, `lacks`, `missing`, `absent`) or of keeping from happening
/// (`prevent`, `avoid`), or a word negated by `un` (`unused`, `unreachable`; not `under`,
/// `until`, `unique`, …).
pub fn is_negation(word: &str) -> bool {
    matches!(
        word,
        "not"
            | "no"
            | "never"
            | "none"
            | "nothing"
            | "nobody"
            | "neither"
            | "nowhere"
            | "cannot"
            | "without"
            | "non"
            | "lack"
            | "lacks"
            | "lacked"
            | "lacking"
            | "missing"
            | "absent"
            | "prevent"
            | "prevents"
            | "prevented"
            | "preventing"
            | "avoid"
            | "avoids"
            | "avoided"
            | "avoiding"
    ) || word.ends_with("n't")
        || matches!(
            word,
            "cant" | "dont" | "doesnt" | "didnt" | "isnt" | "arent" | "wasnt" | "werent" | "wont" | "shouldnt"
        )
        || negated_by_un(word)
}

/// Words starting with `un` that are not `un` + a word.
const NOT_UN_WORDS: &[&str] = &[
    "under",
    "undergo",
    "underlying",
    "underneath",
    "understand",
    "understood",
    "undertake",
    "undo",
    "unified",
    "uniform",
    "unify",
    "union",
    "unique",
    "unit",
    "unite",
    "united",
    "units",
    "unity",
    "universal",
    "universe",
    "university",
    "unix",
    "unless",
    "until",
    "unto",
    "unwind",
];

/// Whether `word` is `un` + a word of four letters or more (`unused`, `unacknowledged`).
pub fn negated_by_un(word: &str) -> bool {
    word.strip_prefix("un").is_some_and(|rest| rest.chars().count() >= 4)
        && !NOT_UN_WORDS.iter().any(|prefix| word.starts_with(prefix))
}

/// Comparatives that `no`/`not` and `than` make a bound, not a denial (`no later than ten
/// minutes`, `not more than 200`).
const COMPARATIVES: &[&str] =
    &["more", "less", "fewer", "later", "earlier", "longer", "shorter", "sooner", "greater", "higher", "lower"];

/// Whether the word at `at` of `words` denies: [`is_negation`], unless it is `no` or `not`
/// opening a bound (`no later than`, `may not exceed`).
pub fn denies(words: &[&str], at: usize) -> bool {
    let word = words[at];
    if matches!(word, "no" | "not") {
        let next = words.get(at + 1).copied().unwrap_or_default();
        let comparative = COMPARATIVES.contains(&next) && words.get(at + 2) == Some(&"than");
        if comparative || matches!(next, "exceed" | "exceeds" | "exceeding") {
            return false;
        }
    }
    is_negation(word)
}

/// `word` as a number written out: (the word, its digits).
pub fn number_word(word: &str) -> Option<(&'static str, &'static str)> {
    NUMBER_WORDS.iter().find(|(written, _)| *written == word).copied()
}

/// Whether `word` starts a clause of its own (`and`, `or`, `but`, `while`, `whereas`,
/// `although`, `though`, `however`): where a denial's reach ends.
pub fn starts_clause(word: &str) -> bool {
    matches!(word, "and" | "or" | "but" | "while" | "whereas" | "although" | "though" | "however")
}

/// The stem a token counts as in the share of content words (rule 2), if it is content:
/// a word's Snowball stem (a number written out counts as its digits), a number's value,
/// a version, an identifier lower-cased. Stop words, negations and quoted strings (whose
/// words are tokens of their own) are not.
pub fn content_stem(kind: &Kind) -> Option<String> {
    match kind {
        Kind::Word(word) => {
            // `unused` is `used` denied: its stem is `use`'s.
            if negated_by_un(word) {
                return Some(ENGLISH.stem(&word[2..]).into_owned());
            }
            if STOP_WORDS.contains(&word.as_str()) || is_negation(word) {
                return None;
            }
            if let Some((_, digits)) = number_word(word) {
                return Some(digits.to_owned());
            }
            Some(ENGLISH.stem(word).into_owned())
        }
        Kind::Number { value, .. } => Some(value.clone()),
        Kind::Version(version) => Some(format!("v{version}")),
        Kind::Identifier(name) => Some(name.to_lowercase()),
        Kind::Quoted(_) => None,
    }
}
