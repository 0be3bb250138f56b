//! A client of a reranking endpoint in the common format (`POST {base}/rerank` with
//! `{model, query, documents, top_n}`, answered with `{results: [{index,
//! relevance_score}]}`), as Cohere, Jina, Voyage, Hugging Face TEI, Infinity and vLLM serve
//! it. Each request is retried on transient failures (429, 5xx, a timeout, a dropped
//! connection) with backoff and jitter; a response is checked before its order is trusted:
//! indexes in range and unique, finite scores.
use std::time::Duration;

use secrecy::ExposeSecret as _;
use serde::Deserialize;
use serde_json::json;

use crate::model_settings::{ModelEndpoint, RerankSettings};
use crate::remote::{describe_send_error, describe_status, read_bounded, retry_after};

/// The shortest and longest wait between two tries.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// The largest response read: an order of a few dozen documents is a few KiB.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Why a request gave no order.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RerankError {
    /// The endpoint could not answer (unreachable, timed out, 5xx, 429), after every try.
    #[error("the rerank endpoint is unavailable: {0}")]
    Unavailable(String),
    /// The endpoint refused the request (400, 401, 404…).
    #[error("the rerank endpoint refused the request: {0}")]
    Rejected(String),
    /// The endpoint answered 200 with something that is not an order of the documents.
    #[error("the rerank endpoint answered with a malformed response: {0}")]
    Malformed(String),
}

/// One document's place in the endpoint's order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranked {
    /// Its index in the documents sent.
    pub index: usize,
    /// The endpoint's relevance score (higher is better).
    pub score: f64,
}

/// A reranking endpoint, its price and the HTTP client that calls it.
#[derive(Debug, Clone)]
pub struct Reranker {
    http: reqwest::Client,
    endpoint: ModelEndpoint,
    usd_nanos_per_search: i64,
    max_retries: u32,
    timeout: Duration,
}

#[derive(Deserialize)]
struct Response {
    results: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    relevance_score: f64,
}

impl Reranker {
    /// What the settings configure: `None` when reranking is off.
    pub fn from_settings(settings: &RerankSettings) -> Result<Option<Self>, String> {
        let Some(endpoint) = settings.endpoint()? else {
            return Ok(None);
        };
        let timeout = Duration::from_millis(settings.timeout_ms.max(1));
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|error| format!("building the rerank client: {error}"))?;
        Ok(Some(Self {
            http,
            endpoint,
            usd_nanos_per_search: crate::research::cost::usd_to_nanos(settings.usd_per_1k_searches / 1_000.0),
            max_retries: settings.max_retries,
            timeout,
        }))
    }

    /// What one request costs, in nanodollars.
    pub fn usd_nanos_per_search(&self) -> i64 {
        self.usd_nanos_per_search
    }

    /// How long one request may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The model asked for.
    pub fn model(&self) -> &str {
        &self.endpoint.model
    }

    /// Why one more request may not be made now, if it may not: `budget` when its price
    /// would pass `budget_left` (nanodollars), `deadline` when it could not finish before
    /// `deadline` (epoch ms) at `now`.
    pub fn refusal(&self, budget_left: Option<i64>, deadline: Option<i64>, now: i64) -> Option<&'static str> {
        if budget_left.is_some_and(|left| self.usd_nanos_per_search > left) {
            return Some("budget");
        }
        let timeout = i64::try_from(self.timeout.as_millis()).unwrap_or(i64::MAX);
        deadline.is_some_and(|deadline| now.saturating_add(timeout) > deadline).then_some("deadline")
    }

    /// The documents' order for `query`, best first, with transient failures retried.
    pub async fn rerank(&self, query: &str, documents: &[String]) -> Result<Vec<Ranked>, RerankError> {
        let mut delays = crate::remote::backoff(BACKOFF_MIN, BACKOFF_MAX, self.max_retries);
        loop {
            match self.try_once(query, documents).await {
                Err(Transient { message, retry_after }) => match delays.next() {
                    Some(backoff) => {
                        let wait = retry_after.unwrap_or(backoff).min(BACKOFF_MAX);
                        tracing::warn!(error = %message, wait_ms = wait.as_millis() as u64, "rerank failed; trying again");
                        tokio::time::sleep(wait).await;
                    }
                    None => return Err(RerankError::Unavailable(message)),
                },
                Ok(done) => return done,
            }
        }
    }

    /// One request: `Err` for a failure worth another try, `Ok` for an answer or a final
    /// failure.
    async fn try_once(&self, query: &str, documents: &[String]) -> Result<Result<Vec<Ranked>, RerankError>, Transient> {
        let url = format!("{}/rerank", self.endpoint.base_url);
        let body =
            json!({ "model": self.endpoint.model, "query": query, "documents": documents, "top_n": documents.len() });
        let mut request = self.http.post(&url).json(&body);
        if let Some(key) = &self.endpoint.api_key {
            request = request.bearer_auth(key.expose_secret());
        }
        let response = request
            .send()
            .await
            .map_err(|error| Transient { message: describe_send_error(&error), retry_after: None })?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let body = match read_bounded(response, MAX_RESPONSE_BYTES).await {
            Ok(body) => body,
            Err(message) => return Err(Transient { message, retry_after }),
        };
        if !status.is_success() {
            let message = describe_status("rerank", status.as_u16(), &body, self.endpoint.api_key.as_ref());
            if matches!(status.as_u16(), 408 | 429) || status.is_server_error() {
                return Err(Transient { message, retry_after });
            }
            return Ok(Err(RerankError::Rejected(message)));
        }
        Ok(parse(&body, documents.len()))
    }
}

/// A failure worth another try.
struct Transient {
    message: String,
    retry_after: Option<Duration>,
}

/// The order of a 200 response, best first, checked against what was sent. An endpoint may
/// leave documents out (a `top_n` it capped); they are not in the order.
fn parse(body: &[u8], documents: usize) -> Result<Vec<Ranked>, RerankError> {
    // serde's message may quote the body (a provider's words): it goes to the debug log only.
    let response: Response = serde_json::from_slice(body).map_err(|error| {
        tracing::debug!(error = %error, "a rerank response is not a list of results");
        RerankError::Malformed("the response is not a list of results".to_owned())
    })?;
    let mut seen = vec![false; documents];
    let mut ranked = Vec::with_capacity(response.results.len());
    for result in response.results {
        let slot = seen
            .get_mut(result.index)
            .ok_or_else(|| RerankError::Malformed(format!("result index {} is out of range", result.index)))?;
        if std::mem::replace(slot, true) {
            return Err(RerankError::Malformed(format!("result index {} appears twice", result.index)));
        }
        if !result.relevance_score.is_finite() {
            return Err(RerankError::Malformed(format!("result {} has no finite score", result.index)));
        }
        ranked.push(Ranked { index: result.index, score: result.relevance_score });
    }
    // Best first, whatever order they came in; ties keep the order sent.
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    Ok(ranked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_best_first_whatever_order_they_arrive_in() {
        let body = br#"{"id":"x","results":[{"index":0,"relevance_score":0.1},{"index":2,"relevance_score":0.9},{"index":1,"relevance_score":0.5}],"meta":{}}"#;
        let order: Vec<usize> = parse(body, 3).expect("an order").iter().map(|ranked| ranked.index).collect();
        assert_eq!(order, [2, 1, 0]);
    }

    #[test]
    fn responses_that_are_not_an_order_of_the_documents_are_malformed() {
        let cases: [&[u8]; 5] = [
            b"<html>oops</html>",
            br#"{"data":[]}"#,
            br#"{"results":[{"index":3,"relevance_score":1}]}"#,
            br#"{"results":[{"index":0,"relevance_score":1},{"index":0,"relevance_score":0.5}]}"#,
            br#"{"results":[{"index":0,"relevance_score":"high"}]}"#,
        ];
        for body in cases {
            assert!(matches!(parse(body, 2), Err(RerankError::Malformed(_))), "{}", String::from_utf8_lossy(body));
        }
    }
}
