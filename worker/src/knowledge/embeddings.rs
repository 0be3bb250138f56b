//! A client of any OpenAI-compatible embeddings endpoint (`POST {base}/embeddings`, as
//! OpenAI, Ollama, vLLM, llama.cpp server and text-embeddings-inference serve it). Every
//! response is checked before a vector is trusted: one embedding per input, indexes in
//! range and unique, finite numbers, one length for all.
use std::time::Duration;

use secrecy::ExposeSecret as _;
use serde::Deserialize;
use serde_json::json;

use crate::model_settings::ModelEndpoint;
use crate::remote::{describe_send_error, describe_status, read_bounded, retry_after};

/// The largest response read: 64 embeddings of 3,072 dimensions as JSON are about 4 MiB.
const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

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

/// An embeddings endpoint and the HTTP client that calls it.
#[derive(Debug, Clone)]
pub struct Embedder {
    http: reqwest::Client,
    endpoint: ModelEndpoint,
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
    pub fn new(endpoint: ModelEndpoint, timeout: Duration) -> Result<Self, reqwest::Error> {
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
        let body = read_bounded(response, MAX_RESPONSE_BYTES)
            .await
            .map_err(|message| EmbedError::Unavailable { message, retry_after })?;
        if !status.is_success() {
            let message = describe_status("embeddings", status.as_u16(), &body, self.endpoint.api_key.as_ref());
            if status.as_u16() == 429 || status.is_server_error() {
                return Err(EmbedError::Unavailable { message, retry_after });
            }
            return Err(EmbedError::Rejected(message));
        }
        parse(&body, inputs.len())
    }
}

/// The vectors of a 200 response, checked against what was asked.
fn parse(body: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    // serde's message may quote the body (a provider's words): it goes to the debug log only.
    let response: Response = serde_json::from_slice(body).map_err(|error| {
        tracing::debug!(error = %error, "an embeddings response is not an embeddings list");
        EmbedError::Malformed("the response is not an embeddings list".to_owned())
    })?;
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
}
