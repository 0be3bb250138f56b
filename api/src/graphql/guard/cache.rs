//! Documents that passed every check, by their exact text. An application sends the same
//! few documents over and over with different variables; parsing one with async-graphql's
//! parser costs more than the rest of a one-row read, so a document already parsed and
//! checked is handed out again instead of parsed again.
//!
//! Only what depends on the text alone is skipped: the document's parse, shape and string
//! checks. Variables, validation against the schema, complexity and every resolver's
//! authorization run on every request as before. The key is the whole text, so two
//! documents share an entry only when they are the same document.
//!
//! The cache is bounded in entries, in the size of a document it keeps and in the text of
//! all it keeps together (a parsed document grows with its text), so what it holds stays
//! small whatever clients send; a client sending many different documents only evicts
//! entries, which costs parses, never correctness.
use std::num::NonZeroUsize;
use std::sync::{Arc, LazyLock, Mutex};

use async_graphql::parser::types::ExecutableDocument;
use lru::LruCache;

/// How many documents are kept.
const ENTRIES: NonZeroUsize = NonZeroUsize::new(256).expect("non-zero");
/// The largest document kept, in bytes of text: applications' documents are far smaller,
/// and a bound on the text bounds the parsed document too.
pub const MAX_CACHED_BYTES: usize = 4 * 1024;
/// The most text all kept documents may have together: 256 documents of up to 1 KiB, or
/// fewer larger ones.
pub const MAX_TOTAL_BYTES: usize = 256 * 1024;

/// The kept documents and the bytes of their texts.
struct Checked {
    documents: LruCache<String, Arc<ExecutableDocument>>,
    text_bytes: usize,
}

static CHECKED: LazyLock<Mutex<Checked>> =
    LazyLock::new(|| Mutex::new(Checked { documents: LruCache::new(ENTRIES), text_bytes: 0 }));

/// A copy of the checked document with exactly this text, if one is kept.
pub fn get(text: &str) -> Option<ExecutableDocument> {
    let found = CHECKED.lock().ok()?.documents.get(text).cloned()?;
    // Copied outside the lock, so concurrent requests only wait for the lookup.
    Some(ExecutableDocument::clone(&found))
}

/// Keeps `document`, parsed from `text` and past every check, for the next request with
/// the same text.
pub fn put(text: &str, document: &ExecutableDocument) {
    if text.len() > MAX_CACHED_BYTES {
        return;
    }
    let document = Arc::new(document.clone());
    let Ok(mut checked) = CHECKED.lock() else { return };
    let checked = &mut *checked;
    if let Some((evicted, _)) = checked.documents.push(text.to_owned(), document) {
        // The entry that made room, or the same text's older entry.
        checked.text_bytes -= evicted.len();
    }
    checked.text_bytes += text.len();
    while checked.text_bytes > MAX_TOTAL_BYTES {
        let Some((evicted, _)) = checked.documents.pop_lru() else { break };
        checked.text_bytes -= evicted.len();
    }
}

/// The bytes of text the kept documents have together.
#[cfg(test)]
pub fn text_bytes() -> usize {
    CHECKED.lock().map_or(0, |checked| checked.text_bytes)
}
