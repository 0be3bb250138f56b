//! What the clients of remote OpenAI-compatible endpoints (embeddings, chat) share: how a
//! `Retry-After` is read, how a failed request is described, how much of a body an error
//! quotes, and how a secret is kept out of every message.
use std::time::Duration;

use secrecy::{ExposeSecret as _, SecretString};

/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// How much of an error body is quoted in messages.
const QUOTED_BODY_CHARS: usize = 200;

/// A `Retry-After` of seconds or an HTTP date, capped at an hour.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => {
            let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
            let millis = (at.timestamp_millis() - entity::now_millis()).max(0);
            Duration::from_millis(u64::try_from(millis).unwrap_or_default())
        }
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// Why a request failed, in words: whether it timed out, could not connect, or broke.
pub fn describe_send_error(error: &reqwest::Error) -> String {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "the request failed"
    };
    // The causes only: reqwest's own message repeats the URL.
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    if causes.is_empty() { what.to_owned() } else { format!("{what}: {}", causes.join(": ")) }
}

/// The start of a body, for an error message.
pub fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut quoted: String = text.chars().take(QUOTED_BODY_CHARS).collect();
    if text.chars().count() > QUOTED_BODY_CHARS {
        quoted.push('…');
    }
    quoted
}

/// `text` with every occurrence of the secret replaced, for messages that quote what an
/// endpoint said (some echo the key they were sent).
pub fn redact(text: &str, secret: Option<&SecretString>) -> String {
    match secret.map(|secret| secret.expose_secret()).filter(|secret| !secret.is_empty()) {
        Some(secret) => text.replace(secret, "[redacted]"),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates_and_is_capped() {
        use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("999999"));
        assert_eq!(retry_after(&headers), Some(MAX_RETRY_AFTER));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&headers), Some(Duration::ZERO), "a date in the past means now");
    }

    #[test]
    fn secrets_are_redacted_wherever_they_appear() {
        let key = SecretString::from("sk-test-123");
        assert_eq!(
            redact("Incorrect API key provided: sk-test-123.", Some(&key)),
            "Incorrect API key provided: [redacted]."
        );
        assert_eq!(redact("nothing here", None), "nothing here");
    }
}
