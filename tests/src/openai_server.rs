//! A stand-in for an OpenAI-compatible chat-completions endpoint, speaking its wire format:
//! `POST /v1/chat/completions` with `{"model", "messages": [{"role", "content"}], "stream",
//! "stream_options": {"include_usage"}, "max_tokens" | "max_completion_tokens",
//! "response_format", ...}` answers a `chat.completion` object, or with `"stream": true` a
//! server-sent-event stream of `chat.completion.chunk` objects ending in `data: [DONE]`;
//! failures answer as OpenAI does (`{"error": {"message", "type", "param", "code"}}`, 429 with
//! `Retry-After`). Each test scripts what the next requests get ([`Reply`]): an answer (slow,
//! without usage, cut short, awkwardly framed), an error, a connection dropped mid-stream, a
//! body that is not what was asked for. Every request is recorded ([`Seen`]) with what it was
//! told, the usage it was billed and whether the client stayed to the end, so a test can check
//! cost accounting and cancellation. By default ([`Reply::Auto`]) it behaves as a small,
//! deterministic model that plans sub-queries, asks what an unexplained abbreviation stands
//! for when asked whether a question is ambiguous, and writes cited answers from the
//! evidence it is given, enough for the worker's pipeline to run end to end.
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Token counts, as OpenAI reports them in `usage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in the request's messages.
    pub prompt_tokens: i64,
    /// Tokens in the answer.
    pub completion_tokens: i64,
}

impl Usage {
    /// `prompt_tokens + completion_tokens`, OpenAI's `total_tokens`.
    pub fn total_tokens(&self) -> i64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// The stand-in's tokenizer: a token per four characters, rounded up past a whole one, of
    /// every message's text and of the answer. Deterministic, so tests can predict cost.
    pub fn estimate(request: &Value, content: &str) -> Self {
        let prompt: usize = messages(request).iter().map(|message| text_of(message).chars().count()).sum();
        Self { prompt_tokens: tokens(prompt), completion_tokens: tokens(content.chars().count()) }
    }
}

/// Whether, and what, usage an [`Answer`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageReport {
    /// [`Usage::estimate`] of the request and the answer (the default).
    Estimated,
    /// Exactly these counts.
    Exactly(Usage),
    /// None at all: no usage chunk when streaming, no `usage` field otherwise, so the client
    /// has to estimate for itself.
    Omitted,
}

/// An answer a request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The assistant's text.
    pub content: String,
    /// The usage it reports.
    pub usage: UsageReport,
    /// Code points per content delta when streaming (default 8).
    pub chunk_chars: usize,
    /// Pause before each delta (default 0): a slow stream. A whole (not streamed) answer
    /// waits as long as its stream would have taken before it is sent.
    pub delay: Duration,
    /// The `finish_reason`: `"stop"` by default, `"length"` for an answer cut at the limit.
    pub finish_reason: String,
    /// Writes the stream the hard way, all of it legal SSE: `:` comment lines (keep-alives)
    /// between and inside events, `id:` and `event: message` fields, a JSON `data:` field
    /// split over two `data:` lines (one without the optional space), CRLF line ends, and
    /// each event handed to the socket in two halves. Default false.
    pub awkward_framing: bool,
}

impl Answer {
    /// Answers `content` with estimated usage, in deltas of 8 code points, at once, `"stop"`,
    /// plainly framed.
    pub fn new(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            usage: UsageReport::Estimated,
            chunk_chars: 8,
            delay: Duration::ZERO,
            finish_reason: "stop".to_owned(),
            awkward_framing: false,
        }
    }

    /// Reports exactly `usage`, or (`None`) no usage at all.
    pub fn with_usage(mut self, usage: Option<Usage>) -> Self {
        self.usage = usage.map_or(UsageReport::Omitted, UsageReport::Exactly);
        self
    }

    /// Streams `chars` code points per delta (at least one).
    pub fn chunked(mut self, chars: usize) -> Self {
        self.chunk_chars = chars;
        self
    }

    /// Pauses `delay` before each delta.
    pub fn slow(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Frames the stream awkwardly (see [`awkward_framing`](Self::awkward_framing)).
    pub fn awkward(mut self) -> Self {
        self.awkward_framing = true;
        self
    }

    /// Ends with this `finish_reason`.
    pub fn finish(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = reason.into();
        self
    }

    /// The content in deltas of `chunk_chars` code points.
    fn pieces(&self) -> Vec<String> {
        let chars: Vec<char> = self.content.chars().collect();
        chars.chunks(self.chunk_chars.max(1)).map(|piece| piece.iter().collect()).collect()
    }
}

/// What one request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A plausible, deterministic model. A *planning* request (one with `response_format`, or
    /// whose system message mentions `sub_queries`) gets `{"sub_queries": [...]}`: the
    /// question (the text after `Question:`, or the last user message), then up to two pairs
    /// of its words of four letters or more; without `response_format` the JSON comes wrapped
    /// in a sentence and a code fence, as chat models like to. A *decision* after a round
    /// (the system message describes `"answered"`) gets `{"answered": true}` once any
    /// evidence was found, else `{"answered": false, "queries": [its words of four letters
    /// or more]}`. A *verification* (the system message asks for yes or no) gets "Yes." when
    /// the passage holds at least half of the claim's words of four letters or more, else
    /// "No.". Any other request is a *generation*: each evidence block of the first user
    /// message (a line `[n] title`, then its text) gives the first sentence of its text
    /// followed by ` [n]` (a repair's later messages change nothing); with no evidence,
    /// "The evidence does not answer the question.". Usage is estimated; `max_tokens` (or
    /// `max_completion_tokens`) truncates the answer with `finish_reason: "length"`.
    Auto,
    /// Answers with this.
    Answer(Answer),
    /// OpenAI's error body with this status, e.g. 401, 400 `context_length_exceeded`, 404
    /// `model_not_found`, 429, 500, 503; see the constructors below.
    Error {
        /// The HTTP status (500 if it is not a valid one).
        status: u16,
        /// `error.message`.
        message: String,
        /// `error.type`, e.g. `invalid_request_error`, `server_error`.
        kind: String,
        /// `error.code`, e.g. `rate_limit_exceeded`.
        code: Option<String>,
        /// A `Retry-After` header, in seconds.
        retry_after_secs: Option<u64>,
    },
    /// Sends the first `after_chars` code points of `content` (streaming: the role chunk,
    /// then deltas of 8; otherwise the whole body up to that point of the content), then
    /// drops the connection: no finish_reason, no usage, no `[DONE]`, no end of the chunked
    /// (or Content-Length) body, so the client sees a body cut off, not an ending.
    Cut {
        /// The answer that was under way.
        content: String,
        /// How much of it is sent.
        after_chars: usize,
    },
    /// 200 with exactly this body and content type: malformed streams, prose instead of JSON.
    Raw {
        /// The `Content-Type` header.
        content_type: String,
        /// The body.
        body: String,
    },
}

impl Reply {
    /// [`Reply::Answer`] of [`Answer::new`].
    pub fn answer(content: impl Into<String>) -> Self {
        Self::Answer(Answer::new(content))
    }

    /// [`Reply::Error`] without `Retry-After`.
    pub fn error(status: u16, message: &str, kind: &str, code: Option<&str>) -> Self {
        Self::Error {
            status,
            message: message.to_owned(),
            kind: kind.to_owned(),
            code: code.map(str::to_owned),
            retry_after_secs: None,
        }
    }

    /// OpenAI's 429 with `Retry-After: seconds`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::Error {
            status: 429,
            message: format!(
                "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1. \
                 Please try again in {retry_after_secs}s."
            ),
            kind: "requests".to_owned(),
            code: Some("rate_limit_exceeded".to_owned()),
            retry_after_secs: Some(retry_after_secs),
        }
    }

    /// OpenAI's 503 when overloaded.
    pub fn unavailable() -> Self {
        Self::error(503, "The server is overloaded or not ready yet.", "server_error", None)
    }

    /// OpenAI's 500.
    pub fn server_error() -> Self {
        Self::error(
            500,
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            None,
        )
    }

    /// OpenAI's 400 for a prompt longer than the model's context.
    pub fn context_length_exceeded() -> Self {
        Self::error(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages resulted in \
             130000 tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            Some("context_length_exceeded"),
        )
    }

    /// OpenAI's 404 for a model that does not exist.
    pub fn model_not_found(model: &str) -> Self {
        Self::error(
            404,
            &format!("The model `{model}` does not exist or you do not have access to it."),
            "invalid_request_error",
            Some("model_not_found"),
        )
    }
}

/// One request as the server saw it, updated as its response goes out.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The request body (a JSON string of the raw text if it was not JSON).
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// What it was answered with: the scripted reply, or the error the stand-in gave a request
    /// it refused (wrong key, bad body) without taking a scripted reply.
    pub reply: Reply,
    /// When it arrived.
    pub at: Instant,
    /// The usage the response reported, once sent (`None` if none was).
    pub usage: Option<Usage>,
    /// The assistant content the response carries (for [`Reply::Auto`], what it made up; for
    /// [`Reply::Cut`], the part sent), once the response starts.
    pub content: Option<String>,
    /// When the client went away before the response ended (hyper dropped the unfinished
    /// response, or the request while it was held or slow), if it did.
    pub dropped_at: Option<Instant>,
    /// Whether the whole response was handed to the connection.
    pub finished: bool,
}

#[derive(Default)]
struct Script {
    queue: VecDeque<Reply>,
    default: Option<Reply>,
    seen: Vec<Seen>,
    expected_key: Option<String>,
    auto_delay: Duration,
}

/// The script, the gate that [`OpenAiServer::hold`] closes, and a counter that
/// [`OpenAiServer::go_down`] bumps to break the responses in flight.
struct Inner {
    script: Mutex<Script>,
    open: watch::Sender<bool>,
    downs: watch::Sender<u64>,
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

type Shared = Arc<Inner>;

/// The running stand-in.
pub struct OpenAiServer {
    addr: SocketAddr,
    script: Shared,
    serving: Mutex<Option<JoinHandle<()>>>,
}

impl OpenAiServer {
    /// Starts on a free port, answering every request with [`Reply::Auto`].
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts on `addr` (port 0 for a free one), answering every request with [`Reply::Auto`].
    pub async fn start_on(addr: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let inner = Inner { script: Mutex::default(), open: watch::Sender::new(true), downs: watch::Sender::new(0) };
        let server = Self { addr, script: Arc::new(inner), serving: Mutex::new(None) };
        server.serve(listener);
        Ok(server)
    }

    /// The base URL to configure, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Requires `Authorization: Bearer key`; other requests get OpenAI's 401. Unlike OpenAI,
    /// which masks it, the message quotes the wrong key in full, so a test can check that the
    /// client does not log or store it.
    pub fn require_key(&self, key: &str) {
        self.script.lock().expected_key = Some(key.to_owned());
    }

    /// The next requests get these replies, in order; then the default.
    pub fn then(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().queue.extend(replies);
    }

    /// Every request after the queue gets `reply` (initially [`Reply::Auto`]).
    pub fn always(&self, reply: Reply) {
        self.script.lock().default = Some(reply);
    }

    /// [`Reply::Auto`] streams with this pause before each delta (initially none), so a
    /// person can watch an answer arrive.
    pub fn auto_delay(&self, delay: Duration) {
        self.script.lock().auto_delay = delay;
    }

    /// The requests so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.script.lock().seen.clone()
    }

    /// Waits until at least `n` requests (refused ones included) have arrived and returns them
    /// all; fails after `timeout`.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> anyhow::Result<Vec<Seen>> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.seen();
            if seen.len() >= n {
                return Ok(seen);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} chat-completion requests arrived within {timeout:?}, not {n}",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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

    /// Closes the port: connections are refused until [`come_back`](Self::come_back). The
    /// responses under way break off as with [`Reply::Cut`], and held requests are dropped
    /// unanswered, as when a real server goes away.
    pub fn go_down(&self) {
        if let Some(serving) = self.serving.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
            serving.abort();
        }
        self.script.downs.send_modify(|downs| *downs += 1);
    }

    /// Listens on the same port again.
    pub async fn come_back(&self) -> anyhow::Result<()> {
        self.go_down();
        let listener = crate::server::bind_again(self.addr).await?;
        self.serve(listener);
        Ok(())
    }

    fn serve(&self, listener: TcpListener) {
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .fallback(unknown_url)
            // Prompts with many evidence passages outgrow axum's 2 MB default; OpenAI takes them.
            .layer(DefaultBodyLimit::max(64 << 20))
            .with_state(self.script.clone());
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        *self.serving.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(serving);
    }
}

impl Drop for OpenAiServer {
    fn drop(&mut self) {
        self.go_down();
    }
}

/// A request refused before it reaches the script: OpenAI's error fields.
struct Refusal {
    status: StatusCode,
    message: String,
    kind: &'static str,
    param: Option<&'static str>,
    code: Option<&'static str>,
}

impl Refusal {
    fn invalid(message: impl Into<String>, param: Option<&'static str>, code: Option<&'static str>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into(), kind: "invalid_request_error", param, code }
    }
}

/// OpenAI's error body.
fn error(status: StatusCode, message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Response {
    (status, axum::Json(json!({ "error": { "message": message, "type": kind, "param": param, "code": code } })))
        .into_response()
}

/// OpenAI's 404 for a path it does not serve.
async fn unknown_url(method: Method, uri: Uri) -> Response {
    error(StatusCode::NOT_FOUND, &format!("Invalid URL ({method} {})", uri.path()), "invalid_request_error", None, None)
}

async fn completions(State(inner): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let expected = inner.lock().expected_key.clone();
    let request = match authorize(expected.as_deref(), authorization.as_deref()).and_then(|()| parse(&body)) {
        Ok(request) => request,
        Err(refusal) => return refuse(&inner, &body, authorization, refusal),
    };
    // Subscribed before anything can wait, so a go_down from here on is noticed.
    let mut downs = inner.downs.subscribe();
    let (reply, auto_delay, guard) = take_reply(&inner, request.clone(), authorization);
    let mut open = inner.open.subscribe();
    tokio::select! {
        _ = open.wait_for(|open| *open) => {}
        _ = downs.changed() => return guard.broken(Bytes::new(), None, downs),
    }
    respond(&request, reply, auto_delay, guard, downs).await
}

/// OpenAI's 401s: no key, or the wrong one (quoted in full, on purpose).
fn authorize(expected: Option<&str>, authorization: Option<&str>) -> Result<(), Refusal> {
    let Some(expected) = expected else { return Ok(()) };
    let unauthorized = |message: String, code| Refusal {
        status: StatusCode::UNAUTHORIZED,
        message,
        kind: "invalid_request_error",
        param: None,
        code,
    };
    match authorization.and_then(|value| value.strip_prefix("Bearer ")).map(str::trim) {
        Some(key) if key == expected => Ok(()),
        None | Some("") => Err(unauthorized(
            "You didn't provide an API key. You need to provide your API key in an Authorization header using \
             Bearer auth (i.e. Authorization: Bearer YOUR_KEY). You can obtain an API key from \
             https://platform.openai.com/account/api-keys."
                .to_owned(),
            None,
        )),
        Some(key) => Err(unauthorized(
            format!(
                "Incorrect API key provided: {key}. You can find your API key at \
                 https://platform.openai.com/account/api-keys."
            ),
            Some("invalid_api_key"),
        )),
    }
}

/// The request, if it is one OpenAI would accept.
fn parse(body: &str) -> Result<Value, Refusal> {
    let request: Value = serde_json::from_str(body).map_err(|_| {
        Refusal::invalid(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your \
             HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)",
            None,
            None,
        )
    })?;
    if !request.is_object() {
        return Err(Refusal::invalid("Invalid type for request body: expected an object.", None, Some("invalid_type")));
    }
    if !request["model"].is_string() {
        return Err(Refusal::invalid("you must provide a model parameter", None, None));
    }
    match &request["messages"] {
        Value::Null => Err(Refusal::invalid(
            "Missing required parameter: 'messages'.",
            Some("messages"),
            Some("missing_required_parameter"),
        )),
        Value::Array(messages) if messages.is_empty() => Err(Refusal::invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array \
             instead.",
            Some("messages"),
            Some("empty_array"),
        )),
        Value::Array(_) => Ok(()),
        _ => Err(Refusal::invalid(
            "Invalid type for 'messages': expected an array of objects.",
            Some("messages"),
            Some("invalid_type"),
        )),
    }?;
    if !request["stream_options"].is_null() && request["stream"] != true {
        return Err(Refusal::invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            Some("stream_options"),
            None,
        ));
    }
    Ok(request)
}

/// Records a refused request (it takes no scripted reply) and answers with its error.
fn refuse(inner: &Inner, body: &str, authorization: Option<String>, refusal: Refusal) -> Response {
    let reply = Reply::Error {
        status: refusal.status.as_u16(),
        message: refusal.message.clone(),
        kind: refusal.kind.to_owned(),
        code: refusal.code.map(str::to_owned),
        retry_after_secs: None,
    };
    inner.lock().seen.push(Seen {
        body: serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned())),
        authorization,
        reply,
        at: Instant::now(),
        usage: None,
        content: None,
        dropped_at: None,
        finished: true,
    });
    error(refusal.status, &refusal.message, refusal.kind, refusal.param, refusal.code)
}

/// The next scripted reply, recorded as seen, with the Auto pace and a guard on the record.
fn take_reply(inner: &Shared, body: Value, authorization: Option<String>) -> (Reply, Duration, Guard) {
    let mut script = inner.lock();
    let reply = script.queue.pop_front().or_else(|| script.default.clone()).unwrap_or(Reply::Auto);
    let index = script.seen.len();
    script.seen.push(Seen {
        body,
        authorization,
        reply: reply.clone(),
        at: Instant::now(),
        usage: None,
        content: None,
        dropped_at: None,
        finished: false,
    });
    (reply, script.auto_delay, Guard { inner: inner.clone(), index, ending: Ending::Open })
}

async fn respond(
    request: &Value,
    reply: Reply,
    auto_delay: Duration,
    guard: Guard,
    downs: watch::Receiver<u64>,
) -> Response {
    match reply {
        Reply::Auto => answer(request, auto_answer(request, auto_delay), guard, downs).await,
        Reply::Answer(scripted) => answer(request, scripted, guard, downs).await,
        Reply::Error { status, message, kind, code, retry_after_secs } => {
            guard.finish();
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = error(status, &message, &kind, None, code.as_deref());
            if let Some(seconds) = retry_after_secs {
                response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
            }
            response
        }
        Reply::Cut { content, after_chars } => cut(request, &content, after_chars, guard, downs),
        Reply::Raw { content_type, body } => {
            guard.finish();
            (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
        }
    }
}

/// The fields every completion and chunk of one response share.
struct Completion {
    id: String,
    created: u64,
    model: Value,
    include_usage: bool,
}

impl Completion {
    fn of(request: &Value, index: usize) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.as_secs())
            .unwrap_or_default();
        Self {
            id: format!("chatcmpl-standin{index:013}"),
            created,
            model: request["model"].clone(),
            include_usage: request["stream_options"]["include_usage"] == true,
        }
    }

    /// The `chat.completion` object of a whole answer.
    fn whole(&self, content: &str, finish_reason: &str, usage: Option<Usage>) -> Value {
        let mut completion = json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_stand_in",
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": content, "refusal": null },
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        });
        if let Some(usage) = usage {
            completion["usage"] = usage_json(usage);
        }
        completion
    }

    /// A `chat.completion.chunk`. With `include_usage`, OpenAI gives every chunk `"usage":
    /// null` but the last.
    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_stand_in",
            "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason }],
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// The last chunk, with usage and no choices.
    fn usage_chunk(&self, usage: Usage) -> Value {
        let mut chunk = self.chunk(Value::Null, None);
        chunk["choices"] = json!([]);
        chunk["usage"] = usage_json(usage);
        chunk
    }

    /// The first chunk: the role, and empty content.
    fn role_chunk(&self) -> Value {
        self.chunk(json!({ "role": "assistant", "content": "", "refusal": null }), None)
    }
}

fn usage_json(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens(),
        "prompt_tokens_details": { "cached_tokens": 0 },
        "completion_tokens_details": { "reasoning_tokens": 0 },
    })
}

async fn answer(request: &Value, answer: Answer, guard: Guard, mut downs: watch::Receiver<u64>) -> Response {
    guard.note_content(&answer.content);
    let completion = Completion::of(request, guard.index);
    let usage = match answer.usage {
        UsageReport::Estimated => Some(Usage::estimate(request, &answer.content)),
        UsageReport::Exactly(usage) => Some(usage),
        UsageReport::Omitted => None,
    };
    if request["stream"] == true {
        return streamed(&completion, &answer, usage, guard, downs);
    }
    // A whole answer arrives when its stream would have ended.
    let pieces = u32::try_from(answer.pieces().len()).unwrap_or(u32::MAX);
    if !pause(answer.delay.saturating_mul(pieces), &mut downs).await {
        return guard.broken(Bytes::new(), None, downs);
    }
    guard.report(usage);
    guard.finish();
    axum::Json(completion.whole(&answer.content, &answer.finish_reason, usage)).into_response()
}

fn streamed(
    completion: &Completion,
    answer: &Answer,
    usage: Option<Usage>,
    guard: Guard,
    downs: watch::Receiver<u64>,
) -> Response {
    let mut events = Events::new(answer.awkward_framing);
    events.json(&completion.role_chunk());
    for piece in answer.pieces() {
        events.pause(answer.delay);
        events.json(&completion.chunk(json!({ "content": piece }), None));
    }
    events.json(&completion.chunk(json!({}), Some(&answer.finish_reason)));
    if let Some(usage) = usage.filter(|_| completion.include_usage) {
        events.steps.push(Step::Report(usage));
        events.json(&completion.usage_chunk(usage));
    }
    events.done();
    event_stream(events.steps, guard, downs)
}

/// [`Reply::Cut`]: the start of the answer, then a dropped connection.
fn cut(request: &Value, content: &str, after_chars: usize, guard: Guard, downs: watch::Receiver<u64>) -> Response {
    let sent: String = content.chars().take(after_chars).collect();
    guard.note_content(&sent);
    let completion = Completion::of(request, guard.index);
    if request["stream"] == true {
        let mut events = Events::new(false);
        events.json(&completion.role_chunk());
        for piece in Answer::new(sent).pieces() {
            events.json(&completion.chunk(json!({ "content": piece }), None));
        }
        events.steps.extend([Step::Pause(FLUSH), Step::Cut]);
        return event_stream(events.steps, guard, downs);
    }
    // The whole body, announced with its full length, sent up to the cut in its content.
    let body = completion.whole(content, "stop", Some(Usage::estimate(request, content))).to_string();
    let opened = serde_json::to_string(&sent).unwrap_or_default();
    let needle = format!("\"content\":{}", opened.strip_suffix('"').unwrap_or(&opened));
    let end = body.find(&needle).map_or(body.len() / 2, |at| at + needle.len());
    guard.broken(Bytes::copy_from_slice(&body.as_bytes()[..end]), Some(body.len()), downs)
}

/// How long a cut response waits after its last bytes: hyper writes out what a body has
/// given it only when the body pauses, and drops its unwritten buffer with the connection, so
/// a cut without a pause would send nothing at all, not even the status line.
const FLUSH: Duration = Duration::from_millis(5);

/// One step of a response body.
enum Step {
    /// Waits.
    Pause(Duration),
    /// Sends these bytes.
    Send(Bytes),
    /// Records that the next bytes report this usage.
    Report(Usage),
    /// Drops the connection.
    Cut,
}

/// Server-sent events, framed plainly or awkwardly.
struct Events {
    awkward: bool,
    count: usize,
    steps: Vec<Step>,
}

impl Events {
    fn new(awkward: bool) -> Self {
        Self { awkward, count: 0, steps: Vec::new() }
    }

    fn pause(&mut self, delay: Duration) {
        if !delay.is_zero() {
            self.steps.push(Step::Pause(delay));
        }
    }

    fn json(&mut self, data: &Value) {
        self.event(&data.to_string());
    }

    fn done(&mut self) {
        self.event("[DONE]");
    }

    fn event(&mut self, data: &str) {
        let index = self.count;
        self.count += 1;
        if !self.awkward {
            self.steps.push(Step::Send(Bytes::from(format!("data: {data}\n\n"))));
            return;
        }
        let mut text = format!(": keep-alive\r\n\r\nid: {index}\r\nevent: message\r\n");
        match data.strip_prefix('{') {
            // JSON allows a line break after the opening brace; SSE joins the lines with one.
            Some(rest) if index.is_multiple_of(2) => {
                text.push_str("data: {\r\n");
                if index.is_multiple_of(4) {
                    text.push_str(": a comment inside the event\r\n");
                }
                text.push_str(&format!("data:{rest}\r\n\r\n"));
            }
            _ => text.push_str(&format!("data: {data}\r\n\r\n")),
        }
        let mut middle = text.len() / 2;
        while !text.is_char_boundary(middle) {
            middle += 1;
        }
        let (head, tail) = text.split_at(middle);
        self.steps.push(Step::Send(Bytes::copy_from_slice(head.as_bytes())));
        self.steps.push(Step::Send(Bytes::copy_from_slice(tail.as_bytes())));
    }
}

/// A `text/event-stream` response playing `steps`.
fn event_stream(steps: Vec<Step>, guard: Guard, downs: watch::Receiver<u64>) -> Response {
    let body = Playing { steps: steps.into(), guard, downs }.into_body();
    ([(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")], body).into_response()
}

/// Waits `delay`, unless the server goes down first; whether it is still up.
async fn pause(delay: Duration, downs: &mut watch::Receiver<u64>) -> bool {
    if delay.is_zero() {
        return !is_down(downs);
    }
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        _ = downs.changed() => false,
    }
}

fn is_down(downs: &watch::Receiver<u64>) -> bool {
    downs.has_changed().unwrap_or(true)
}

/// A response body being played. Dropped by hyper when the client goes away, it takes its
/// [`Guard`] with it, which records when.
struct Playing {
    steps: VecDeque<Step>,
    guard: Guard,
    downs: watch::Receiver<u64>,
}

impl Playing {
    fn into_body(self) -> Body {
        Body::from_stream(futures_util::stream::unfold(self, |mut playing| async move {
            let item = playing.next().await?;
            Some((item, playing))
        }))
    }

    async fn next(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        while let Some(step) = self.steps.pop_front() {
            if is_down(&self.downs) {
                return self.cut();
            }
            match step {
                Step::Pause(delay) => {
                    if !pause(delay, &mut self.downs).await {
                        return self.cut();
                    }
                }
                Step::Send(bytes) => return Some(Ok(bytes)),
                Step::Report(usage) => self.guard.report(Some(usage)),
                Step::Cut => return self.cut(),
            }
        }
        self.guard.finish_mut();
        None
    }

    /// An error for hyper, which then aborts the connection instead of ending the body.
    fn cut(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        self.steps.clear();
        self.guard.ending = Ending::Cut;
        Some(Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "the stand-in cut the response")))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    Open,
    Finished,
    Cut,
}

/// Keeps one [`Seen`] up to date as its response goes out; dropped before the response
/// ended (the handler or the body abandoned by hyper), it records `dropped_at`.
struct Guard {
    inner: Shared,
    index: usize,
    ending: Ending,
}

impl Guard {
    fn update(&self, change: impl FnOnce(&mut Seen)) {
        if let Some(seen) = self.inner.lock().seen.get_mut(self.index) {
            change(seen);
        }
    }

    fn note_content(&self, content: &str) {
        self.update(|seen| seen.content = Some(content.to_owned()));
    }

    fn report(&self, usage: Option<Usage>) {
        if usage.is_some() {
            self.update(|seen| seen.usage = usage);
        }
    }

    fn finish(mut self) {
        self.finish_mut();
    }

    fn finish_mut(&mut self) {
        if self.ending == Ending::Open {
            self.ending = Ending::Finished;
            self.update(|seen| seen.finished = true);
        }
    }

    /// A 200 that sends `head` and then drops the connection; `length` announces a
    /// Content-Length the body never reaches.
    fn broken(self, head: Bytes, length: Option<usize>, downs: watch::Receiver<u64>) -> Response {
        let steps =
            if head.is_empty() { vec![Step::Cut] } else { vec![Step::Send(head), Step::Pause(FLUSH), Step::Cut] };
        let body = Playing { steps: steps.into(), guard: self, downs }.into_body();
        let mut response = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
        if let Some(length) = length {
            response.headers_mut().insert(header::CONTENT_LENGTH, length.into());
        }
        response
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.ending == Ending::Open {
            let now = Instant::now();
            self.update(|seen| seen.dropped_at = Some(now));
        }
    }
}

/// A token per four characters, plus one.
fn tokens(chars: usize) -> i64 {
    i64::try_from(chars / 4 + 1).unwrap_or(i64::MAX)
}

fn messages(request: &Value) -> &[Value] {
    request["messages"].as_array().map_or(&[], Vec::as_slice)
}

/// A message's text: its `content` string, or its text parts joined.
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|part| part["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

fn texts_of<'a>(request: &'a Value, roles: &'a [&str]) -> impl Iterator<Item = String> + 'a {
    messages(request)
        .iter()
        .filter(|message| message["role"].as_str().is_some_and(|role| roles.contains(&role)))
        .map(text_of)
}

/// What [`Reply::Auto`] answers `request`.
fn auto_answer(request: &Value, delay: Duration) -> Answer {
    let first_user = texts_of(request, &["user"]).next().unwrap_or_default();
    let content = if is_clarifying(request) {
        clarify(&first_user)
    } else if is_deciding(request) {
        decide(&first_user)
    } else if is_verifying(request) {
        verify(&first_user)
    } else if is_planning(request) {
        plan(request, &first_user)
    } else {
        // The first user message holds the question and the evidence (a repair adds the
        // answer that was wrong and what was wrong with it after it).
        cite(&first_user)
    };
    let limit = request["max_completion_tokens"].as_i64().or_else(|| request["max_tokens"].as_i64());
    let mut answer = Answer::new(content).slow(delay);
    if let Some(limit) = limit.filter(|limit| *limit > 0)
        && Usage::estimate(&Value::Null, &answer.content).completion_tokens > limit
    {
        // `4 * limit - 1` code points are exactly `limit` tokens.
        let keep = usize::try_from(limit).unwrap_or(usize::MAX).saturating_mul(4).saturating_sub(1);
        answer.content = answer.content.chars().take(keep).collect();
        answer.finish_reason = "length".to_owned();
    }
    answer
}

/// Whether to ask a clarifying question: the system message describes `{"ambiguous": …}`.
fn is_clarifying(request: &Value) -> bool {
    texts_of(request, &["system", "developer"]).any(|text| text.contains("\"ambiguous\""))
}

/// Ambiguous when the question holds an unexplained abbreviation (a word of two to five
/// capital letters): asks what it stands for. Otherwise not ambiguous.
fn clarify(text: &str) -> String {
    let question = question_of(text);
    let abbreviation = question
        .split(|c: char| !c.is_alphanumeric())
        .find(|word| (2..=5).contains(&word.chars().count()) && word.chars().all(|c| c.is_ascii_uppercase()));
    match abbreviation {
        Some(word) => json!({ "ambiguous": true, "question": format!("What does {word} stand for here?") }).to_string(),
        None => json!({ "ambiguous": false }).to_string(),
    }
}

/// A decision after a round: the system message describes `{"answered": …}`.
fn is_deciding(request: &Value) -> bool {
    texts_of(request, &["system", "developer"]).any(|text| text.contains("\"answered\""))
}

/// A claim's verification: the system message asks for yes or no.
fn is_verifying(request: &Value) -> bool {
    texts_of(request, &["system", "developer"]).any(|text| text.contains("yes or no"))
}

/// Answered once any evidence was found; otherwise the question's words of four letters
/// or more, to search one by one.
fn decide(text: &str) -> String {
    let found = text.split_once("Evidence found:").is_some_and(|(_, after)| !after.trim().starts_with("(none)"));
    if found {
        return json!({ "answered": true }).to_string();
    }
    let question = question_of(text);
    let words: Vec<String> = question
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| word.chars().count() >= 4)
        .map(str::to_lowercase)
        .collect();
    json!({ "answered": false, "queries": words }).to_string()
}

/// "Yes." when the passage holds at least half of the claim's words of four letters or
/// more, "No." otherwise.
fn verify(text: &str) -> String {
    let passage = text.split_once("Claim:").map_or("", |(before, _)| before).to_lowercase();
    let claim = text.split_once("Claim:").map_or("", |(_, after)| after.lines().next().unwrap_or_default());
    let words: Vec<String> = claim
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| word.chars().count() >= 4)
        .map(str::to_lowercase)
        .collect();
    let held = words.iter().filter(|word| passage.contains(word.as_str())).count();
    if held * 2 >= words.len() { "Yes.".to_owned() } else { "No.".to_owned() }
}

fn is_planning(request: &Value) -> bool {
    !request["response_format"].is_null()
        || texts_of(request, &["system", "developer"]).any(|text| text.contains("sub_queries"))
}

/// `{"sub_queries": [...]}` for the question, bare when a response format was asked for.
fn plan(request: &Value, last_user: &str) -> String {
    let plan = json!({ "sub_queries": sub_queries(&question_of(last_user)) }).to_string();
    if request["response_format"].is_null() { format!("Here is the plan:\n```json\n{plan}\n```") } else { plan }
}

/// The text after `Question:`, or the whole message.
fn question_of(text: &str) -> String {
    text.lines()
        .find_map(|line| line.split_once("Question:").map(|(_, after)| after.trim()).filter(|after| !after.is_empty()))
        .unwrap_or_else(|| text.trim())
        .to_owned()
}

/// The question, then pairs of its words of four letters or more; three at most.
fn sub_queries(question: &str) -> Vec<String> {
    if question.is_empty() {
        return Vec::new();
    }
    let words: Vec<&str> =
        question.split(|c: char| !c.is_alphanumeric()).filter(|word| word.chars().count() >= 4).collect();
    let mut queries = vec![question.to_owned()];
    for pair in words.chunks_exact(2) {
        let query = pair.join(" ");
        if queries.len() == 3 {
            break;
        }
        if !queries.contains(&query) {
            queries.push(query);
        }
    }
    queries
}

/// The first sentence of each evidence block, cited: `"<sentence> [n]"`, joined by spaces.
fn cite(text: &str) -> String {
    let mut cited = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(number) = block_number(line) else { continue };
        let mut body = Vec::new();
        while let Some(next) = lines.peek() {
            if block_number(next).is_some() || (next.trim().is_empty() && !body.is_empty()) {
                break;
            }
            body.extend(lines.next().map(str::trim).filter(|line| !line.is_empty()));
        }
        if let Some(sentence) = first_sentence(&body.join(" ")) {
            cited.push(format!("{sentence} [{number}]"));
        }
    }
    if cited.is_empty() { "The evidence does not answer the question.".to_owned() } else { cited.join(" ") }
}

/// The digits of an evidence block's first line, `[n] title`.
fn block_number(line: &str) -> Option<&str> {
    let (digits, after) = line.strip_prefix('[')?.split_once(']')?;
    let numeric = !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit());
    (numeric && after.starts_with(' ')).then_some(digits)
}

/// Up to the first `.`, `!` or `?` that ends a word.
fn first_sentence(text: &str) -> Option<&str> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let end = text.char_indices().find_map(|(at, c)| {
        let end = at + c.len_utf8();
        (matches!(c, '.' | '!' | '?') && text[end..].chars().next().is_none_or(char::is_whitespace)).then_some(end)
    });
    Some(&text[..end.unwrap_or(text.len())])
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};

    use super::{Answer, OpenAiServer, Reply, Usage, cite, sub_queries};

    /// The `data` of each event of an SSE text, parsed as the spec says: CR LF or LF line
    /// ends, comment lines skipped, one leading space stripped, `data` lines joined by `\n`.
    fn sse_data(text: &str) -> Vec<String> {
        let text = text.replace("\r\n", "\n");
        let mut events = Vec::new();
        for block in text.split("\n\n") {
            let data: Vec<&str> = block
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|value| value.strip_prefix(' ').unwrap_or(value))
                .collect();
            if !data.is_empty() {
                events.push(data.join("\n"));
            }
        }
        events
    }

    fn streamed_request(content: &str) -> Value {
        json!({
            "model": "gpt-4o-mini",
            "messages": [{ "role": "user", "content": content }],
            "stream": true,
            "stream_options": { "include_usage": true },
        })
    }

    async fn post(server: &OpenAiServer, body: &Value) -> anyhow::Result<reqwest::Response> {
        Ok(reqwest::Client::new().post(format!("{}/chat/completions", server.base_url())).json(body).send().await?)
    }

    /// The chunks of a stream: the content they spell, the finish reason, the usage.
    fn read_stream(text: &str) -> anyhow::Result<(String, Option<String>, Option<Value>)> {
        let data = sse_data(text);
        anyhow::ensure!(data.last().map(String::as_str) == Some("[DONE]"), "no [DONE] at the end: {data:?}");
        let chunks = data[..data.len() - 1]
            .iter()
            .map(|chunk| serde_json::from_str::<Value>(chunk))
            .collect::<Result<Vec<_>, _>>()?;
        anyhow::ensure!(chunks[0]["choices"][0]["delta"]["role"] == "assistant");
        let content = chunks.iter().filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str()).collect();
        let finish = chunks.iter().find_map(|chunk| chunk["choices"][0]["finish_reason"].as_str()).map(str::to_owned);
        let usage = chunks.iter().map(|chunk| chunk["usage"].clone()).find(|usage| !usage.is_null());
        Ok((content, finish, usage))
    }

    #[tokio::test]
    async fn a_streamed_answer_sends_chunks_finish_usage_and_done() -> anyhow::Result<()> {
        let server = OpenAiServer::start().await?;
        let content = "Rust is memory safe without a garbage collector.";
        server.then([Reply::Answer(Answer::new(content).chunked(5))]);
        let response = post(&server, &streamed_request("Tell me about Rust.")).await?;
        assert_eq!(response.headers()[reqwest::header::CONTENT_TYPE], "text/event-stream; charset=utf-8");
        let text = response.text().await?;
        assert!(text.starts_with("data: {"), "{text}");
        assert!(text.contains(r#""object":"chat.completion.chunk""#), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        let (streamed, finish, usage) = read_stream(&text)?;
        assert_eq!(streamed, content);
        assert_eq!(finish.as_deref(), Some("stop"));
        let seen = server.wait_for_requests(1, Duration::from_secs(1)).await?;
        let expected = Usage { prompt_tokens: 19 / 4 + 1, completion_tokens: 49 / 4 + 1 };
        assert_eq!(seen[0].usage, Some(expected));
        let usage = usage.ok_or_else(|| anyhow::anyhow!("no usage chunk"))?;
        assert_eq!(usage["total_tokens"], expected.total_tokens());
        assert!(seen[0].finished && seen[0].dropped_at.is_none(), "{:?}", seen[0]);
        Ok(())
    }

    #[tokio::test]
    async fn awkward_framing_is_still_valid_sse() -> anyhow::Result<()> {
        let server = OpenAiServer::start().await?;
        let content = "Ünïcödé splits — across deltas, and lines.";
        server.then([Reply::Answer(Answer::new(content).chunked(3).awkward())]);
        let text = post(&server, &streamed_request("Hi")).await?.text().await?;
        assert!(text.contains(": keep-alive\r\n") && text.contains("data: {\r\ndata:\""), "{text}");
        let (streamed, finish, usage) = read_stream(&text)?;
        assert_eq!(streamed, content);
        assert_eq!(finish.as_deref(), Some("stop"));
        assert!(usage.is_some());
        Ok(())
    }

    #[tokio::test]
    async fn without_include_usage_or_with_usage_omitted_no_usage_is_sent() -> anyhow::Result<()> {
        let server = OpenAiServer::start().await?;
        server.then([Reply::answer("One."), Reply::Answer(Answer::new("Two.").with_usage(None))]);
        let mut request = streamed_request("Hi");
        request["stream_options"] = Value::Null;
        let (_, _, usage) = read_stream(&post(&server, &request).await?.text().await?)?;
        assert!(usage.is_none());
        let (_, _, usage) = read_stream(&post(&server, &streamed_request("Hi")).await?.text().await?)?;
        assert!(usage.is_none());
        assert!(server.seen().iter().all(|seen| seen.usage.is_none() && seen.finished));
        Ok(())
    }

    #[tokio::test]
    async fn a_whole_answer_is_a_chat_completion() -> anyhow::Result<()> {
        let server = OpenAiServer::start().await?;
        server.then([Reply::Answer(Answer::new("Short.").finish("length"))]);
        let request = json!({ "model": "m", "messages": [{ "role": "user", "content": "12345678" }] });
        let response = post(&server, &request).await?;
        assert!(response.headers().contains_key(reqwest::header::CONTENT_LENGTH));
        let body: Value = response.json().await?;
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["model"], "m");
        assert_eq!(body["choices"][0]["message"], json!({ "role": "assistant", "content": "Short.", "refusal": null }));
        assert_eq!(body["choices"][0]["finish_reason"], "length");
        assert_eq!(body["usage"]["prompt_tokens"], 3);
        assert_eq!(body["usage"]["completion_tokens"], 2);
        Ok(())
    }

    #[tokio::test]
    async fn an_error_carries_retry_after() -> anyhow::Result<()> {
        let server = OpenAiServer::start().await?;
        server.then([Reply::rate_limited(7)]);
        let response = post(&server, &streamed_request("Hi")).await?;
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()[reqwest::header::RETRY_AFTER], "7");
        let body: Value = response.json().await?;
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
        assert_eq!(body["error"]["param"], Value::Null);
        Ok(())
    }

    #[tokio::test]
    async fn a_wrong_key_is_quoted_in_full_and_bad_requests_are_refused() -> anyhow::Result<()> {
        let server = OpenAiServer::start().await?;
        server.require_key("sk-right");
        let url = format!("{}/chat/completions", server.base_url());
        let client = reqwest::Client::new();
        let wrong = client.post(&url).bearer_auth("sk-wrong-1234").json(&streamed_request("Hi")).send().await?;
        assert_eq!(wrong.status(), 401);
        let body: Value = wrong.json().await?;
        assert!(body["error"]["message"].as_str().is_some_and(|message| message.contains("sk-wrong-1234")));
        assert_eq!(body["error"]["code"], "invalid_api_key");
        let garbled = client.post(&url).bearer_auth("sk-right").body("{not json").send().await?;
        assert_eq!(garbled.status(), 400);
        let no_messages = client.post(&url).bearer_auth("sk-right").json(&json!({ "model": "m" })).send().await?;
        assert_eq!(no_messages.status(), 400);
        let body: Value = no_messages.json().await?;
        assert_eq!(body["error"]["param"], "messages");
        assert_eq!(server.seen().len(), 3);
        Ok(())
    }

    #[tokio::test]
    async fn a_client_leaving_a_slow_stream_is_noticed_at_once() -> anyhow::Result<()> {
        let server = OpenAiServer::start().await?;
        server.then([Reply::Answer(
            Answer::new("a slow answer, one code point at a time").chunked(1).slow(Duration::from_millis(100)),
        )]);
        let mut response = post(&server, &streamed_request("Hi")).await?;
        let first = response.chunk().await?;
        assert!(first.is_some());
        let left = Instant::now();
        drop(response);
        let dropped_at = dropped_at(&server, left).await?;
        let latency = dropped_at.saturating_duration_since(left);
        eprintln!("dropped_at recorded {latency:?} after the client dropped the response");
        assert!(latency < Duration::from_millis(200), "{latency:?}");
        assert!(!server.seen()[0].finished);
        Ok(())
    }

    #[tokio::test]
    async fn a_request_cancelled_while_held_is_noticed_at_once() -> anyhow::Result<()> {
        let server = Arc::new(OpenAiServer::start().await?);
        server.hold();
        let asking = server.clone();
        let task = tokio::spawn(async move { anyhow::Ok(post(&asking, &streamed_request("Hi")).await?.text().await?) });
        server.wait_for_requests(1, Duration::from_secs(2)).await?;
        let cancelled = Instant::now();
        task.abort();
        let dropped_at = dropped_at(&server, cancelled).await?;
        let latency = dropped_at.saturating_duration_since(cancelled);
        eprintln!("dropped_at recorded {latency:?} after a held request's task was aborted");
        assert!(latency < Duration::from_millis(200), "{latency:?}");
        server.release();
        Ok(())
    }

    /// When the first request's client was seen to leave, waiting up to 2 s after `since`.
    async fn dropped_at(server: &OpenAiServer, since: Instant) -> anyhow::Result<Instant> {
        loop {
            if let Some(dropped_at) = server.seen()[0].dropped_at {
                return Ok(dropped_at);
            }
            anyhow::ensure!(since.elapsed() < Duration::from_secs(2), "the drop was not noticed");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn a_cut_fails_the_body_instead_of_ending_it() -> anyhow::Result<()> {
        let server = OpenAiServer::start().await?;
        let cut = Reply::Cut { content: "This answer never ends.".to_owned(), after_chars: 10 };
        server.then([cut.clone(), cut]);
        let streamed = post(&server, &streamed_request("Hi")).await?;
        assert_eq!(streamed.status(), 200);
        let error = streamed.text().await.err().map(|error| format!("{error:?}"));
        eprintln!("a cut stream fails with {error:?}");
        assert!(error.is_some());
        let whole = post(&server, &json!({ "model": "m", "messages": [{ "role": "user", "content": "Hi" }] })).await?;
        assert!(whole.text().await.is_err());
        let seen = server.seen();
        assert!(seen.iter().all(|seen| !seen.finished && seen.dropped_at.is_none() && seen.usage.is_none()));
        assert_eq!(seen[0].content.as_deref(), Some("This answe"));
        Ok(())
    }

    #[tokio::test]
    async fn going_down_breaks_a_stream_under_way() -> anyhow::Result<()> {
        let server = OpenAiServer::start().await?;
        server.then([Reply::Answer(Answer::new("slow and long").chunked(1).slow(Duration::from_millis(50)))]);
        let mut response = post(&server, &streamed_request("Hi")).await?;
        assert!(response.chunk().await?.is_some());
        server.go_down();
        assert!(response.text().await.is_err());
        server.come_back().await?;
        assert_eq!(post(&server, &streamed_request("Hi")).await?.status(), 200);
        Ok(())
    }

    #[tokio::test]
    async fn auto_plans_and_cites() -> anyhow::Result<()> {
        let server = OpenAiServer::start().await?;
        let planning = json!({
            "model": "m",
            "response_format": { "type": "json_object" },
            "messages": [
                { "role": "system", "content": "Plan the research." },
                { "role": "user", "content": "Mode: deep\nQuestion: How does borrow checking prevent data races?" },
            ],
        });
        let body: Value = post(&server, &planning).await?.json().await?;
        let plan: Value = serde_json::from_str(body["choices"][0]["message"]["content"].as_str().unwrap_or_default())?;
        assert_eq!(
            plan["sub_queries"],
            json!(["How does borrow checking prevent data races?", "does borrow", "checking prevent"])
        );
        let evidence = "Evidence:\n[1] The Rust book\nOwnership rules. They are checked at compile time.\n\n\
                        [2] Nomicon\n\nData races are prevented by Send and Sync! More text.\n\nQuestion: why?";
        let generation = json!({ "model": "m", "messages": [{ "role": "user", "content": evidence }] });
        let body: Value = post(&server, &generation).await?.json().await?;
        assert_eq!(
            body["choices"][0]["message"]["content"],
            "Ownership rules. [1] Data races are prevented by Send and Sync! [2]"
        );
        Ok(())
    }

    #[test]
    fn auto_without_evidence_or_format_still_answers() {
        assert_eq!(cite("Just a question"), "The evidence does not answer the question.");
        assert_eq!(sub_queries("Why"), vec!["Why".to_owned()]);
        let request = json!({
            "model": "m",
            "messages": [{ "role": "system", "content": "Reply with sub_queries." }, { "role": "user", "content": "x" }],
            "max_tokens": 2,
        });
        let answer = super::auto_answer(&request, Duration::ZERO);
        assert!(answer.content.starts_with("Here is"), "{answer:?}");
        assert_eq!(answer.content.chars().count(), 7);
        assert_eq!(answer.finish_reason, "length");
    }
}
