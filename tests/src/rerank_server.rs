//! A stand-in for a reranking endpoint in the common format Cohere, Jina, Voyage, Hugging
//! Face TEI, Infinity and vLLM serve: `POST /v1/rerank` with `{"model", "query",
//! "documents": [string], "top_n"}` answers `{"id", "results": [{"index",
//! "relevance_score"}], "meta"}`, best first, at most `top_n` of them; failures answer with
//! an error body and status (429 with `Retry-After`). Each test scripts what the next
//! requests get. Scores are lexical by default (the share of the query's words a document
//! holds), or put documents holding a marker first.
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What one request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The documents ranked by the share of the query's words each holds.
    Rank,
    /// Documents holding this text first (score 0.9), the rest after (0.1), in the order sent.
    Prefer(String),
    /// 503 with an overload error.
    Unavailable,
    /// 200 with this body (not a ranking).
    Malformed(String),
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request body.
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

#[derive(Default)]
struct Script {
    queue: VecDeque<Reply>,
    default: Option<Reply>,
    seen: Vec<Seen>,
}

type Shared = Arc<Mutex<Script>>;

/// The running stand-in.
pub struct RerankServer {
    addr: SocketAddr,
    script: Shared,
    serving: JoinHandle<()>,
}

impl RerankServer {
    /// Starts on a free port, ranking every request lexically.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let script = Shared::default();
        let app = Router::new().route("/v1/rerank", post(rerank)).with_state(script.clone());
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, script, serving })
    }

    /// The base URL to configure (`KFS_RERANK_BASE_URL`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The next requests get these replies, in order; then the default.
    pub fn then(&self, replies: impl IntoIterator<Item = Reply>) {
        self.lock().queue.extend(replies);
    }

    /// Every request after the queue gets `reply` (initially [`Reply::Rank`]).
    pub fn always(&self, reply: Reply) {
        self.lock().default = Some(reply);
    }

    /// The requests so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for RerankServer {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "message": message }))).into_response()
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase).collect()
}

async fn rerank(State(script): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let Ok(request) = serde_json::from_str::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "invalid JSON body");
    };
    let reply = {
        let mut script = script.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        script.seen.push(Seen { body: request.clone(), authorization });
        let default = script.default.clone().unwrap_or(Reply::Rank);
        script.queue.pop_front().unwrap_or(default)
    };
    let (Some(query), Some(documents)) = (request["query"].as_str(), request["documents"].as_array()) else {
        return error(StatusCode::BAD_REQUEST, "query and documents are required");
    };
    let documents: Vec<&str> = documents.iter().filter_map(Value::as_str).collect();
    let top_n = request["top_n"].as_u64().map_or(documents.len(), |n| usize::try_from(n).unwrap_or(usize::MAX));
    let scores: Vec<f64> = match &reply {
        Reply::Unavailable => {
            return (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "0")], "overloaded").into_response();
        }
        Reply::Malformed(body) => return (StatusCode::OK, body.clone()).into_response(),
        Reply::Rank => {
            let asked = words(query);
            documents
                .iter()
                .map(|document| {
                    let held = words(document);
                    let shared = asked.iter().filter(|word| held.contains(word)).count();
                    shared as f64 / asked.len().max(1) as f64
                })
                .collect()
        }
        Reply::Prefer(marker) => {
            documents.iter().map(|document| if document.contains(marker.as_str()) { 0.9 } else { 0.1 }).collect()
        }
    };
    let mut order: Vec<usize> = (0..documents.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(top_n);
    let results: Vec<Value> =
        order.into_iter().map(|index| json!({ "index": index, "relevance_score": scores[index] })).collect();
    axum::Json(json!({ "id": "rerank-1", "results": results, "meta": { "billed_units": { "search_units": 1 } } }))
        .into_response()
}
