//! One call to an OpenAI-compatible chat-completions endpoint, streamed: the request asks
//! for `stream: true` with `stream_options.include_usage`, the server-sent events are
//! parsed by `eventsource-stream` (multi-line `data:`, comments, CRLF), content deltas go
//! to the caller as they arrive, and the usage chunk gives the token counts. A stream that
//! ends before it says it finished is an error, never a short answer. A server that
//! answers with one JSON completion instead of a stream is read as such.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::StreamExt as _;
use secrecy::ExposeSecret as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::model_settings::ChatEndpoint;
use crate::remote::{describe_send_error, describe_status, error_identifiers, redact, retry_after};

/// The most a response may hold, stream or body: a server that streams without end fails
/// the call rather than the worker's memory.
const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system` or `user`.
    pub role: &'static str,
    /// The text.
    pub content: String,
}

/// What one call asks for.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The model.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Whether to ask for a JSON object (`response_format`).
    pub json: bool,
    /// The most it may write, when less than `KFS_OPENAI_MAX_OUTPUT_TOKENS` (a yes or no,
    /// a short JSON decision): bounds its time and its worst-case cost.
    pub max_tokens: Option<u32>,
}

impl ChatRequest {
    /// The most this request may write under an endpoint allowing `endpoint_max`.
    pub fn output_limit(&self, endpoint_max: u32) -> u32 {
        self.max_tokens.map_or(endpoint_max, |max| max.min(endpoint_max))
    }
}

/// Token counts a server reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
}

/// What a call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatOutput {
    /// The whole content.
    pub content: String,
    /// The usage, when the server sent one.
    pub usage: Option<Usage>,
    /// Why the model stopped (`stop`, `length`…), when the server said.
    pub finish_reason: Option<String>,
}

/// Why a call gave no output.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// Worth trying again: 408, 409, 429, 5xx, a timeout, a dropped connection, a stream
    /// cut or garbled. `partial` is what had been streamed before it broke.
    #[error("{message}")]
    Transient {
        /// What happened (redacted).
        message: String,
        /// The server's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
        /// Content received before the failure.
        partial: String,
    },
    /// The same request fails again (400, 401, 403, 404, a prompt over the model's context).
    #[error("{description}")]
    Refused {
        /// Status, error type and code (never the provider's words).
        description: String,
        /// A request parameter a 400 named, which the server may not take.
        unsupported: Option<&'static str>,
    },
}

/// What a server turned out not to accept, learned from its 400s and remembered: servers
/// differ (OpenAI's reasoning models want `max_completion_tokens` and no `temperature`;
/// some local servers know neither `response_format` nor `stream_options`).
#[derive(Debug, Default)]
struct Dialect {
    no_response_format: AtomicBool,
    max_completion_tokens: AtomicBool,
    no_temperature: AtomicBool,
    no_stream_options: AtomicBool,
}

impl Dialect {
    fn flags(&self) -> [(&'static str, &AtomicBool); 4] {
        [
            ("response_format", &self.no_response_format),
            ("max_tokens", &self.max_completion_tokens),
            ("temperature", &self.no_temperature),
            ("stream_options", &self.no_stream_options),
        ]
    }

    /// The first parameter not yet adapted to that a 400's body names (read here and
    /// nowhere else: the body is the provider's text).
    fn named_in(&self, body: &str) -> Option<&'static str> {
        self.flags()
            .into_iter()
            .find(|(parameter, flag)| body.contains(parameter) && !flag.load(Ordering::Relaxed))
            .map(|(parameter, _)| parameter)
    }

    /// Adapts to `parameter` not being taken; false when it was adapted to already.
    fn adapt(&self, parameter: &str) -> bool {
        self.flags()
            .into_iter()
            .find(|(name, _)| *name == parameter)
            .is_some_and(|(_, flag)| !flag.swap(true, Ordering::Relaxed))
    }
}

/// The HTTP client of one chat endpoint.
#[derive(Debug, Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    endpoint: ChatEndpoint,
    dialect: Arc<Dialect>,
}

impl ChatClient {
    /// A client whose requests (stream included) give up after the endpoint's timeout.
    pub fn new(endpoint: ChatEndpoint) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(endpoint.timeout)
            .connect_timeout(endpoint.timeout.min(Duration::from_secs(10)))
            .build()?;
        Ok(Self { http, endpoint, dialect: Arc::default() })
    }

    /// The endpoint's settings.
    pub fn endpoint(&self) -> &ChatEndpoint {
        &self.endpoint
    }

    /// Makes one streamed call, handing each content delta to `on_delta` as it arrives. A
    /// 400 naming a parameter the server does not take is answered by asking again
    /// without it (remembered for later calls). Dropping the future drops the connection.
    pub async fn stream(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ChatOutput, CallError> {
        loop {
            match self.stream_once(request, on_delta).await {
                Err(CallError::Refused { description, unsupported: Some(parameter) })
                    if self.dialect.adapt(parameter) =>
                {
                    tracing::info!(error = %description, parameter, "the model endpoint refused a parameter; asking without it");
                }
                other => return other,
            }
        }
    }

    /// The request body, in the server's dialect.
    fn body(&self, request: &ChatRequest) -> Value {
        let dialect = &self.dialect;
        let mut body = json!({ "model": request.model, "messages": request.messages, "stream": true });
        if !dialect.no_stream_options.load(Ordering::Relaxed) {
            body["stream_options"] = json!({ "include_usage": true });
        }
        let limit =
            if dialect.max_completion_tokens.load(Ordering::Relaxed) { "max_completion_tokens" } else { "max_tokens" };
        body[limit] = json!(request.output_limit(self.endpoint.max_output_tokens));
        if !dialect.no_temperature.load(Ordering::Relaxed) {
            body["temperature"] = json!(0);
        }
        if request.json && !dialect.no_response_format.load(Ordering::Relaxed) {
            body["response_format"] = json!({ "type": "json_object" });
        }
        body
    }

    async fn stream_once(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ChatOutput, CallError> {
        let body = self.body(request);
        let mut builder = self.http.post(format!("{}/chat/completions", self.endpoint.base_url)).json(&body);
        if let Some(key) = &self.endpoint.api_key {
            builder = builder.bearer_auth(key.expose_secret());
        }
        let response = builder.send().await.map_err(|error| self.transient(describe_send_error(&error), None, ""))?;
        let status = response.status();
        if !status.is_success() {
            let wait = retry_after(response.headers());
            let text = read_bounded(response).await.unwrap_or_default();
            let description = describe_status("chat", status.as_u16(), text.as_bytes(), self.endpoint.api_key.as_ref());
            let retry = matches!(status.as_u16(), 408 | 409 | 429) || status.is_server_error();
            return Err(if retry {
                self.transient(description, wait, "")
            } else {
                let unsupported = (status.as_u16() == 400).then(|| self.dialect.named_in(&text)).flatten();
                CallError::Refused { description, unsupported }
            });
        }
        let is_stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        if !is_stream {
            return self.whole(response, on_delta).await;
        }
        self.events(response, on_delta).await
    }

    /// Reads a stream of chunks until `[DONE]`.
    async fn events(
        &self,
        response: reqwest::Response,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ChatOutput, CallError> {
        let mut events = response.bytes_stream().eventsource();
        let mut output = ChatOutput { content: String::new(), usage: None, finish_reason: None };
        let mut received = 0usize;
        let mut done = false;
        while let Some(event) = events.next().await {
            let event = event.map_err(|error| {
                let why = match &error {
                    eventsource_stream::EventStreamError::Transport(error) => describe_send_error(error),
                    eventsource_stream::EventStreamError::Utf8(_) => "it was not UTF-8".to_owned(),
                    eventsource_stream::EventStreamError::Parser(_) => "an event could not be parsed".to_owned(),
                };
                self.transient(format!("the stream broke: {why}"), None, &output.content)
            })?;
            received += event.data.len();
            if received > MAX_RESPONSE_BYTES {
                return Err(self.transient("the stream passed 8 MiB".to_owned(), None, &output.content));
            }
            let data = event.data.trim();
            if data == "[DONE]" {
                done = true;
                break;
            }
            if data.is_empty() {
                continue;
            }
            let chunk: Value = serde_json::from_str(data).map_err(|_| {
                tracing::debug!(chunk = %self.redact(data), "a chat stream sent a chunk that is not JSON");
                self.transient("the stream sent a chunk that is not JSON".to_owned(), None, &output.content)
            })?;
            if let Some(error) = chunk.get("error") {
                tracing::debug!(error = %self.redact(&error.to_string()), "a chat stream ended with an error");
                let message = format!("the stream ended with an error{}", error_identifiers(error));
                return Err(self.transient(message, None, &output.content));
            }
            self.read_chunk(&chunk, &mut output, on_delta)?;
        }
        // Some servers close after the last chunk without `[DONE]`; that is an end only if
        // the model said it finished.
        if !done && output.finish_reason.is_none() {
            return Err(self.transient("the stream ended before the answer did".to_owned(), None, &output.content));
        }
        Ok(output)
    }

    fn read_chunk(
        &self,
        chunk: &Value,
        output: &mut ChatOutput,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<(), CallError> {
        let malformed = || {
            tracing::debug!(chunk = %self.redact(&chunk.to_string()), "a chat stream sent a malformed chunk");
            self.transient("the stream sent a malformed chunk".to_owned(), None, &output.content)
        };
        if let Some(usage) = chunk.get("usage").filter(|usage| !usage.is_null()) {
            output.usage = Some(serde_json::from_value(usage.clone()).map_err(|_| malformed())?);
        }
        let Some(choices) = chunk.get("choices") else {
            return if output.usage.is_some() { Ok(()) } else { Err(malformed()) };
        };
        let Some(choices) = choices.as_array() else { return Err(malformed()) };
        for choice in choices.iter().filter(|choice| choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0) {
            if let Some(content) = choice.pointer("/delta/content").and_then(Value::as_str) {
                output.content.push_str(content);
                on_delta(content);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                output.finish_reason = Some(reason.to_owned());
            }
        }
        Ok(())
    }

    /// A server that ignored `stream: true`: one `chat.completion` body.
    async fn whole(
        &self,
        response: reqwest::Response,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ChatOutput, CallError> {
        let text = read_bounded(response).await.map_err(|message| self.transient(message, None, ""))?;
        let body: Value = serde_json::from_str(&text).map_err(|_| {
            tracing::debug!(body = %self.redact(&text), "a chat response is not JSON");
            self.transient("the response is not JSON".to_owned(), None, "")
        })?;
        let content = body.pointer("/choices/0/message/content").and_then(Value::as_str).ok_or_else(|| {
            tracing::debug!(body = %self.redact(&text), "a chat response has no message");
            self.transient("the response has no message".to_owned(), None, "")
        })?;
        on_delta(content);
        Ok(ChatOutput {
            content: content.to_owned(),
            usage: body.get("usage").cloned().and_then(|usage| serde_json::from_value(usage).ok()),
            finish_reason: body.pointer("/choices/0/finish_reason").and_then(Value::as_str).map(str::to_owned),
        })
    }

    fn transient(&self, message: String, retry_after: Option<Duration>, partial: &str) -> CallError {
        CallError::Transient { message: self.redact(&message), retry_after, partial: partial.to_owned() }
    }

    fn redact(&self, text: &str) -> String {
        redact(text, self.endpoint.api_key.as_ref())
    }
}

/// A body as text, up to [`MAX_RESPONSE_BYTES`].
async fn read_bounded(response: reqwest::Response) -> Result<String, String> {
    let body = crate::remote::read_bounded(response, MAX_RESPONSE_BYTES).await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_400_naming_a_parameter_is_adapted_to_once() {
        let dialect = Dialect::default();
        let body = r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model.","type":"invalid_request_error"}}"#;
        assert_eq!(dialect.named_in(body), Some("max_tokens"));
        assert!(dialect.adapt("max_tokens"));
        assert_eq!(dialect.named_in(body), None, "adapted to already");
        assert!(!dialect.adapt("max_tokens"));
        assert_eq!(dialect.named_in("the prompt is too long"), None);
    }
}
