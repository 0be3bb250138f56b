//! Counting a prompt's tokens before it is sent, so the budget check knows the worst case.
//! Models whose tokenizer is known (OpenAI's, by name) are counted exactly with the
//! vocabulary `tiktoken-rs` bundles (nothing is downloaded); any other model is bounded
//! from above by its UTF-8 length, since every byte-level BPE token covers at least one
//! byte. Chat framing adds a few tokens per message, bounded by [`PER_MESSAGE`] and
//! [`PER_REPLY`].
use tiktoken_rs::CoreBPE;

/// The most tokens the chat format adds around one message (role, separators): three for
/// OpenAI's current models, one spare.
pub const PER_MESSAGE: i64 = 4;
/// The tokens that prime the assistant's reply: three for OpenAI's current models.
pub const PER_REPLY: i64 = 3;

/// How a model's prompt tokens are counted.
#[derive(Clone, Copy)]
pub enum Counter {
    /// Exactly, with the model's own tokenizer.
    Exact(&'static CoreBPE),
    /// An upper bound: one token per byte.
    Bytes,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Exact(_) => "Exact",
            Self::Bytes => "Bytes",
        })
    }
}

impl Counter {
    /// The counter for `model`. Loading a vocabulary takes a moment the first time: call
    /// it off the async threads (`spawn_blocking`).
    pub fn for_model(model: &str) -> Self {
        match tiktoken_rs::bpe_for_model(model) {
            Ok(bpe) => Self::Exact(bpe),
            Err(_) => Self::Bytes,
        }
    }

    /// Whether counts are exact rather than bounds.
    #[cfg(test)]
    pub fn is_exact(&self) -> bool {
        matches!(self, Self::Exact(_))
    }

    /// The tokens of one text.
    pub fn count(&self, text: &str) -> i64 {
        match self {
            // Ordinary encoding: special-token spellings in a passage are plain text to
            // the model, and never fewer tokens than that.
            Self::Exact(bpe) => bpe.encode_ordinary(text).len() as i64,
            Self::Bytes => text.len() as i64,
        }
    }

    /// The prompt tokens of a chat request whose messages have these contents.
    pub fn count_messages<'a>(&self, contents: impl IntoIterator<Item = &'a str>) -> i64 {
        contents.into_iter().map(|content| self.count(content) + PER_MESSAGE).sum::<i64>() + PER_REPLY
    }
}

/// The tokens of a text no usage report covered (a stream cut before its usage chunk):
/// roughly four characters a token, never less than one per word.
pub fn estimate(text: &str) -> i64 {
    let by_chars = (text.chars().count() as i64 + 3) / 4;
    by_chars.max(text.split_whitespace().count() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_count_exactly_and_others_are_bounded_by_bytes() {
        let exact = Counter::for_model("gpt-4o-mini");
        assert!(exact.is_exact());
        // "hello world" is two tokens in o200k_base.
        assert_eq!(exact.count("hello world"), 2);
        let bound = Counter::for_model("llama3.1:8b");
        assert!(!bound.is_exact());
        assert_eq!(bound.count("hello world"), 11);
        assert!(exact.count("ünïcödé text") <= bound.count("ünïcödé text"));
    }

    #[test]
    fn chat_framing_is_added_per_message_and_once_for_the_reply() {
        let bound = Counter::Bytes;
        assert_eq!(bound.count_messages(["ab", "cde"]), 2 + 3 + 2 * PER_MESSAGE + PER_REPLY);
    }
}
