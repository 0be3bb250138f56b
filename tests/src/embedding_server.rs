//! A stand-in for an OpenAI-compatible embeddings endpoint, speaking its wire format:
//! `POST /v1/embeddings` with `{"model", "input": string | [string]}` answers
//! `{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
//! "usage"}`, and failures answer as OpenAI does (`{"error": {"message", "type", "code"}}`,
//! 429 with `Retry-After`). Each test scripts what the next requests get: embeddings, an
//! outage (503, or the port closed outright), rate limits, malformed bodies. The vectors
//! are deterministic ([`embed_text`]): hashed words and character trigrams, so texts that
//! share words or word pieces are similar, much as a small real model behaves lexically.
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

/// The length of every vector [`embed_text`] makes.
pub const DIMENSIONS: usize = 256;

/// What one request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The embeddings of the inputs.
    Embed,
    /// 503 with OpenAI's overload error.
    Unavailable,
    /// 429 with `Retry-After: seconds`.
    RateLimited {
        /// The `Retry-After` value, in seconds.
        retry_after_secs: u64,
    },
    /// 200 with this body (not the embeddings asked for).
    Malformed(String),
    /// OpenAI's error body with this status; `echo_input` puts the first input in the
    /// message, as providers that quote what they refused do.
    Error {
        /// The HTTP status.
        status: u16,
        /// `error.message`, before any echo.
        message: String,
        /// `error.code`.
        code: Option<String>,
        /// Whether the message quotes the first input.
        echo_input: bool,
    },
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The `model` asked for.
    pub model: String,
    /// How many inputs it carried.
    pub inputs: usize,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// What it was answered with.
    pub reply: Reply,
    /// When it arrived.
    pub at: std::time::Instant,
}

#[derive(Default)]
struct Script {
    queue: VecDeque<Reply>,
    default: Option<Reply>,
    seen: Vec<Seen>,
    expected_key: Option<String>,
}

/// The script, and the gate that [`EmbeddingServer::hold`] closes.
struct Inner {
    script: Mutex<Script>,
    open: tokio::sync::watch::Sender<bool>,
}

type Shared = Arc<Inner>;

/// The running stand-in.
pub struct EmbeddingServer {
    addr: SocketAddr,
    script: Shared,
    serving: Mutex<Option<JoinHandle<()>>>,
}

impl EmbeddingServer {
    /// Starts on a free port, answering every request with embeddings.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let inner = Inner { script: Mutex::default(), open: tokio::sync::watch::Sender::new(true) };
        let server = Self { addr, script: Arc::new(inner), serving: Mutex::new(None) };
        server.serve(listener);
        Ok(server)
    }

    /// Requires `Authorization: Bearer key`; other requests get OpenAI's 401.
    pub fn require_key(&self, key: &str) {
        self.lock().expected_key = Some(key.to_owned());
    }

    /// The base URL to configure (`KFS_EMBEDDINGS_BASE_URL`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The next requests get these replies, in order; then the default.
    pub fn then(&self, replies: impl IntoIterator<Item = Reply>) {
        self.lock().queue.extend(replies);
    }

    /// Every request after the queue gets `reply` (initially [`Reply::Embed`]).
    pub fn always(&self, reply: Reply) {
        self.lock().default = Some(reply);
    }

    /// The requests so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    /// Requests from now on are recorded and then wait, unanswered, until
    /// [`release`](Self::release): a test can act while a caller is mid-request.
    pub fn hold(&self) {
        self.script.open.send_replace(false);
    }

    /// Answers the held requests and stops holding.
    pub fn release(&self) {
        self.script.open.send_replace(true);
    }

    /// Closes the port: connections are refused until [`come_back`](Self::come_back).
    pub fn go_down(&self) {
        if let Some(serving) = self.serving.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
            serving.abort();
        }
    }

    /// Listens on the same port again.
    pub async fn come_back(&self) -> anyhow::Result<()> {
        self.go_down();
        let listener = crate::server::bind_again(self.addr).await?;
        self.serve(listener);
        Ok(())
    }

    fn serve(&self, listener: TcpListener) {
        let app = Router::new().route("/v1/embeddings", post(embeddings)).with_state(self.script.clone());
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        *self.serving.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(serving);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.script.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for EmbeddingServer {
    fn drop(&mut self) {
        self.go_down();
    }
}

/// OpenAI's error body.
fn error(status: StatusCode, message: &str, kind: &str, code: Option<&str>) -> Response {
    (status, axum::Json(json!({ "error": { "message": message, "type": kind, "param": null, "code": code } })))
        .into_response()
}

async fn embeddings(State(inner): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let request: Value = match serde_json::from_str(&body) {
        Ok(request) => request,
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "We could not parse the JSON body of your request.",
                "invalid_request_error",
                None,
            );
        }
    };
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    let inputs: Vec<String> = match &request["input"] {
        Value::String(text) => vec![text.clone()],
        Value::Array(items) if items.iter().all(Value::is_string) && !items.is_empty() => {
            items.iter().filter_map(Value::as_str).map(str::to_owned).collect()
        }
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "'input' must be a string or a non-empty array of strings",
                "invalid_request_error",
                None,
            );
        }
    };
    let reply = {
        let mut script = inner.script.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let expected = script.expected_key.clone();
        if let Some(key) = expected
            && authorization.as_deref() != Some(format!("Bearer {key}").as_str())
        {
            return error(
                StatusCode::UNAUTHORIZED,
                "Incorrect API key provided.",
                "invalid_request_error",
                Some("invalid_api_key"),
            );
        }
        let reply = script.queue.pop_front().or_else(|| script.default.clone()).unwrap_or(Reply::Embed);
        let at = std::time::Instant::now();
        script.seen.push(Seen { model: model.clone(), inputs: inputs.len(), authorization, reply: reply.clone(), at });
        reply
    };
    let _ = inner.open.subscribe().wait_for(|open| *open).await;
    match reply {
        Reply::Embed => {
            let data: Vec<Value> = inputs
                .iter()
                .enumerate()
                .map(|(index, text)| json!({ "object": "embedding", "index": index, "embedding": embed_text(text) }))
                .collect();
            let tokens: usize = inputs.iter().map(|text| text.split_whitespace().count()).sum();
            axum::Json(json!({
                "object": "list",
                "data": data,
                "model": model,
                "usage": { "prompt_tokens": tokens, "total_tokens": tokens },
            }))
            .into_response()
        }
        Reply::Unavailable => {
            error(StatusCode::SERVICE_UNAVAILABLE, "The server is overloaded or not ready yet.", "server_error", None)
        }
        Reply::RateLimited { retry_after_secs } => {
            let mut response = error(
                StatusCode::TOO_MANY_REQUESTS,
                "Rate limit reached for requests",
                "requests",
                Some("rate_limit_exceeded"),
            );
            response.headers_mut().insert(header::RETRY_AFTER, retry_after_secs.into());
            response
        }
        Reply::Malformed(body) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Reply::Error { status, message, code, echo_input } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let message = match (echo_input, inputs.first()) {
                (true, Some(input)) => format!("{message}: '{input}'"),
                _ => message,
            };
            error(status, &message, "invalid_request_error", code.as_deref())
        }
    }
}

/// A deterministic unit vector of `DIMENSIONS` for a text: every lower-cased word adds 1
/// at its hashed position and each of its character trigrams adds 0.5 at theirs.
pub fn embed_text(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0f32; DIMENSIONS];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()) {
        let word = word.to_lowercase();
        vector[bucket(word.as_bytes())] += 1.0;
        let padded: Vec<char> = format!(" {word} ").chars().collect();
        for trigram in padded.windows(3) {
            let piece: String = trigram.iter().collect();
            vector[bucket(piece.as_bytes())] += 0.5;
        }
    }
    let norm = vector.iter().map(|value| value * value).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|value| *value /= norm);
    }
    vector
}

/// FNV-1a, folded into a position.
fn bucket(bytes: &[u8]) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    usize::try_from(hash % DIMENSIONS as u64).unwrap_or_default()
}
