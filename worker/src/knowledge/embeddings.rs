//! A client of any OpenAI-compatible embeddings endpoint (`POST {base}/embeddings`, as
//! OpenAI, Ollama, vLLM, llama.cpp server and text-embeddings-inference serve it). Every
//! response is checked before a vector is trusted: one embedding per input, indexes in
//! range and unique, finite numbers, one length for all.
use std::time::Duration;

use secrecy::ExposeSecret as _;
use serde::Deserialize;
use serde_json::json;

use crate::config::EmbeddingEndpoint;

/// Why a request gave no embeddings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmbedError {
    /// The endpoint could not answer now (unreachable, timed out, 5xx, 429): try again
    /// later, no sooner than `retry_after` when it said.
    #[error("the embeddings endpoint is unavailable: {message}")]
    Unavailable {
        /// What happened, for `indexingError` and the log.
        message: String,
        /// The endpoint's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// The endpoint refused the request (400, 401, 404…): the same request fails again.
    #[error("the embeddings endpoint refused the request: {0}")]
    Rejected(String),
    /// The endpoint answered 200 with something that is not the embeddings asked for.
    #[error("the embeddings endpoint answered with a malformed response: {0}")]
    Malformed(String),
}

impl EmbedError {
    /// Whether trying the same request again later may work.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}

/// The longest `Retry-After` honoured; a longer one is cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// How much of an error body is quoted in messages.
const QUOTED_BODY_CHARS: usize = 200;

/// An embeddings endpoint and the HTTP client that calls it.
#[derive(Debug, Clone)]
pub struct Embedder {
    http: reqwest::Client,
    endpoint: EmbeddingEndpoint,
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Datum>,
}

#[derive(Deserialize)]
struct Datum {
    index: Option<usize>,
    embedding: Vec<f64>,
}

impl Embedder {
    /// A client whose requests give up after `timeout`.
    pub fn new(endpoint: EmbeddingEndpoint, timeout: Duration) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .build()?;
        Ok(Self { http, endpoint })
    }

    /// The model name stored with every vector.
    pub fn model(&self) -> &str {
        &self.endpoint.model
    }

    /// One embedding per input, in input order.
    pub async fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let url = format!("{}/embeddings", self.endpoint.base_url);
        let mut request = self.http.post(&url).json(&json!({ "model": self.endpoint.model, "input": inputs }));
        if let Some(key) = &self.endpoint.api_key {
            request = request.bearer_auth(key.expose_secret());
        }
        let response = request.send().await.map_err(|error| EmbedError::Unavailable {
            // Without the URL's query or any header: nothing secret reaches the message.
            message: describe_send_error(&error),
            retry_after: None,
        })?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let body = response.bytes().await.map_err(|error| EmbedError::Unavailable {
            message: format!("reading the response failed: {}", describe_send_error(&error)),
            retry_after,
        })?;
        if status.as_u16() == 429 || status.is_server_error() {
            return Err(EmbedError::Unavailable { message: format!("HTTP {status}: {}", quote(&body)), retry_after });
        }
        if !status.is_success() {
            return Err(EmbedError::Rejected(format!("HTTP {status}: {}", quote(&body))));
        }
        parse(&body, inputs.len())
    }
}

/// The vectors of a 200 response, checked against what was asked.
fn parse(body: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    let response: Response = serde_json::from_slice(body)
        .map_err(|error| EmbedError::Malformed(format!("not an embeddings list ({error}): {}", quote(body))))?;
    if response.data.len() != expected {
        return Err(EmbedError::Malformed(format!("{} embeddings for {expected} inputs", response.data.len())));
    }
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; expected];
    for (position, datum) in response.data.into_iter().enumerate() {
        let index = datum.index.unwrap_or(position);
        let slot = vectors
            .get_mut(index)
            .ok_or_else(|| EmbedError::Malformed(format!("embedding index {index} is out of range")))?;
        if slot.is_some() {
            return Err(EmbedError::Malformed(format!("embedding index {index} appears twice")));
        }
        if datum.embedding.is_empty() {
            return Err(EmbedError::Malformed(format!("embedding {index} is empty")));
        }
        let vector: Vec<f32> = datum.embedding.iter().map(|value| *value as f32).collect();
        if vector.iter().any(|value| !value.is_finite()) {
            return Err(EmbedError::Malformed(format!("embedding {index} holds a number out of f32 range")));
        }
        *slot = Some(vector);
    }
    let vectors: Vec<Vec<f32>> = vectors.into_iter().flatten().collect();
    if vectors.iter().any(|vector| vector.len() != vectors[0].len()) {
        return Err(EmbedError::Malformed("embeddings of different lengths in one response".to_owned()));
    }
    Ok(vectors)
}

/// A `Retry-After` of seconds or an HTTP date, capped at an hour.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
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
fn describe_send_error(error: &reqwest::Error) -> String {
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
fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut quoted: String = text.chars().take(QUOTED_BODY_CHARS).collect();
    if text.chars().count() > QUOTED_BODY_CHARS {
        quoted.push('…');
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeddings_come_back_in_input_order_whatever_order_they_arrive_in() {
        let body = br#"{"data":[{"index":1,"embedding":[0.5,1]},{"index":0,"embedding":[1,0]}]}"#;
        assert_eq!(parse(body, 2), Ok(vec![vec![1.0, 0.0], vec![0.5, 1.0]]));
    }

    #[test]
    fn responses_that_are_not_the_embeddings_asked_for_are_malformed() {
        let cases: [(&[u8], usize); 6] = [
            (b"<html>oops</html>", 1),
            (br#"{"data":[]}"#, 1),
            (br#"{"data":[{"index":3,"embedding":[1]}]}"#, 1),
            (br#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#, 2),
            (br#"{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[1,2]}]}"#, 2),
            (br#"{"data":[{"index":0,"embedding":[1e300]}]}"#, 1),
        ];
        for (body, expected) in cases {
            assert!(
                matches!(parse(body, expected), Err(EmbedError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

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
}
