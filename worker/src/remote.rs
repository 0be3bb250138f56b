//! What the clients of remote endpoints (embeddings, chat, webhooks) share: how a
//! `Retry-After` is read, how a failed request is described, and how a secret is kept out
//! of every message.
//!
//! A provider's own words never reach a row, an event, a metric or a page: several quote
//! the prompt (the task's question and evidence) in their error messages, and a task's
//! `error` is shown to operators of every tenant. What is stored is a fixed description
//! built from the HTTP status and the provider's error `type` and `code` when each is a
//! short identifier; the provider's text goes to the log at debug level only.
use std::time::Duration;

use futures_util::StreamExt as _;

use secrecy::{ExposeSecret as _, SecretString};

/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// The longest error `type` or `code` a description keeps; longer ones are left out.
const MAX_IDENTIFIER_CHARS: usize = 64;

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

/// The waits between tries of one request: exponential from `min` to `max`, jittered,
/// at most `retries` of them.
pub fn backoff(min: Duration, max: Duration, retries: u32) -> impl Iterator<Item = Duration> {
    use backon::BackoffBuilder as _;
    backon::ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_max_times(retries as usize)
        .with_jitter()
        .build()
}

/// A response's body, read up to `max` bytes: an endpoint that sends more is refused
/// before it can fill memory.
pub async fn read_bounded(response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|error| format!("the response broke: {}", describe_send_error(&error)))?;
        if body.len() + chunk.len() > max {
            return Err(format!("the response passed {} KiB", max / 1024));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
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

/// An error `type` or `code` as a description may carry it: a string or number of letters,
/// digits, `_`, `-` and `.` only (so no sentence, and nothing a prompt could fill in).
fn identifier(value: Option<&serde_json::Value>) -> Option<String> {
    let text = match value? {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Number(number) => number.to_string(),
        _ => return None,
    };
    let plain = !text.is_empty()
        && text.chars().count() <= MAX_IDENTIFIER_CHARS
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    plain.then_some(text)
}

/// The identifiers of an OpenAI-style error object (`{"type", "code", "message"}`): its
/// type and code, as ` (type t, code c)`, or nothing when it has neither.
pub fn error_identifiers(error: &serde_json::Value) -> String {
    let parts: Vec<String> = [("type", "type"), ("code", "code")]
        .into_iter()
        .filter_map(|(field, name)| identifier(error.get(field)).map(|value| format!("{name} {value}")))
        .collect();
    if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) }
}

/// Describes an HTTP failure of `endpoint` (`chat`, `embeddings`, `rerank`…) by its status
/// and the error body's identifiers alone, e.g. `the chat endpoint answered HTTP 400 (type
/// invalid_request_error, code context_length_exceeded)`. The body itself is logged at
/// debug level (with `secret` redacted) and nowhere else.
pub fn describe_status(endpoint: &str, status: u16, body: &[u8], secret: Option<&SecretString>) -> String {
    let text = String::from_utf8_lossy(body);
    tracing::debug!(endpoint, status, body = %redact(&text, secret), "a provider answered with an error");
    let error = serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|body| body.get("error").cloned());
    let identifiers = error.as_ref().map(error_identifiers).unwrap_or_default();
    format!("the {endpoint} endpoint answered HTTP {status}{identifiers}")
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
    fn a_description_keeps_status_type_and_code_and_never_the_providers_words() {
        let body = br#"{"error":{"message":"Your prompt 'What is the merger codename?' is too long","type":"invalid_request_error","code":"context_length_exceeded","param":"messages"}}"#;
        assert_eq!(
            describe_status("chat", 400, body, None),
            "the chat endpoint answered HTTP 400 (type invalid_request_error, code context_length_exceeded)"
        );
        // A type or code that is a sentence (or could hold one) is left out.
        let sneaky = br#"{"error":{"type":"echo: What is the merger codename?","code":"x y"}}"#;
        assert_eq!(describe_status("rerank", 400, sneaky, None), "the rerank endpoint answered HTTP 400");
        assert_eq!(
            describe_status("embeddings", 502, b"<html>What is the merger codename?</html>", None),
            "the embeddings endpoint answered HTTP 502"
        );
        assert_eq!(
            describe_status("chat", 429, br#"{"error":{"code":429}}"#, None),
            "the chat endpoint answered HTTP 429 (code 429)"
        );
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
