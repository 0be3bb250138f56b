//! One WebSocket connection: the handshake, keep-alives, and one task per running
//! operation. Outgoing messages pass through a bounded queue; a client too slow to drain
//! it is closed (1013) instead of being allowed to grow memory or stall others.
use std::collections::HashMap;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::stream::{SplitSink, StreamExt};
use futures_util::SinkExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::protocol::{Incoming, Outgoing, Subprotocol, close, parse};
use crate::auth::{Principal, authenticate};
use crate::http::GraphqlEndpoint;

/// Tunables of a connection, from the settings.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// How long a client may wait before `connection_init`.
    pub init_timeout: Duration,
    /// How often the server pings an idle connection.
    pub ping_interval: Duration,
    /// Operations one connection may run at once.
    pub max_subscriptions: usize,
    /// Messages that may wait for a slow client before it is closed.
    pub send_queue: usize,
    /// How long one write may block before the client counts as too slow.
    pub send_timeout: Duration,
}

/// Why the connection ends.
enum Ending {
    /// Close with this code and reason.
    Close(u16, String),
    /// The client went away; nothing to send.
    Gone,
}

/// Serves the connection until either side ends it.
pub async fn serve(socket: WebSocket, protocol: Subprotocol, endpoint: GraphqlEndpoint, limits: ConnectionLimits, shutdown: CancellationToken) {
    let (mut sink, mut stream) = socket.split();
    // Boxed messages: the channel allocates its first block of 32 slots up front, each
    // the size of the largest message, and every idle connection would carry it.
    let (queue, mut outgoing) = mpsc::channel::<Box<Outgoing>>(limits.send_queue);
    let (finished_tx, mut finished) = mpsc::unbounded_channel::<String>();
    let slow = CancellationToken::new();
    let mut operations: HashMap<String, JoinHandle<()>> = HashMap::new();
    // Set by an accepted `connection_init`; the inner `None` is an anonymous connection.
    let mut session: Option<Option<Principal>> = None;
    let mut acknowledged = false;
    let init_deadline = tokio::time::sleep(limits.init_timeout);
    tokio::pin!(init_deadline);
    let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + limits.ping_interval, limits.ping_interval);

    let ending = loop {
        // Shutdown and a slow consumer first: they end the connection whatever else is
        // ready. Then outgoing messages before new input, so a busy client cannot starve
        // its own results.
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break Ending::Close(close::GOING_AWAY, "server shutting down".into()),
            () = slow.cancelled() => break Ending::Close(close::SLOW_CONSUMER, "subscriber too slow to keep up".into()),
            Some(message) = outgoing.recv() => {
                if !send(&mut sink, protocol, &message, limits.send_timeout).await {
                    break Ending::Gone;
                }
            }
            Some(id) = finished.recv() => {
                operations.remove(&id);
            }
            () = &mut init_deadline, if !acknowledged => {
                break Ending::Close(close::INIT_TIMEOUT, "Connection initialisation timeout".into());
            }
            _ = keep_alive.tick(), if acknowledged => {
                if !send(&mut sink, protocol, &Outgoing::KeepAlive, limits.send_timeout).await {
                    break Ending::Gone;
                }
            }
            frame = stream.next() => {
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Binary(_))) => break Ending::Close(close::INVALID_MESSAGE, "Binary frames are not supported".into()),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break Ending::Gone,
                };
                let message = match parse(protocol, text.as_str()) {
                    Ok(message) => message,
                    Err(reason) => break Ending::Close(close::INVALID_MESSAGE, reason),
                };
                match message {
                    Incoming::Init(payload) => {
                        if session.is_some() || acknowledged {
                            break Ending::Close(close::TOO_MANY_INITS, "Too many initialisation requests".into());
                        }
                        // Boxed: authentication may read the database, and its future
                        // inline would size every connection's task for its whole life.
                        match Box::pin(initialise(&endpoint, &payload)).await {
                            Ok(principal) => {
                                session = Some(principal);
                                acknowledged = true;
                                if !send(&mut sink, protocol, &Outgoing::Ack, limits.send_timeout).await {
                                    break Ending::Gone;
                                }
                            }
                            Err(reason) => break Ending::Close(close::FORBIDDEN, reason),
                        }
                    }
                    Incoming::Ping(payload) => {
                        if !send(&mut sink, protocol, &Outgoing::Pong(payload), limits.send_timeout).await {
                            break Ending::Gone;
                        }
                    }
                    Incoming::Pong => {}
                    Incoming::Terminate => break Ending::Gone,
                    Incoming::Stop(id) => {
                        if let Some(operation) = operations.remove(&id) {
                            operation.abort();
                        }
                    }
                    Incoming::Subscribe(id, request) => {
                        let Some(principal) = session.as_ref().filter(|_| acknowledged) else {
                            break Ending::Close(close::UNAUTHORIZED, "Unauthorized".into());
                        };
                        if operations.contains_key(&id) {
                            break Ending::Close(close::DUPLICATE_ID, format!("Subscriber for {id} already exists"));
                        }
                        if operations.len() >= limits.max_subscriptions {
                            let error = serde_json::json!([{ "message": format!("at most {} operations may run on one connection", limits.max_subscriptions), "extensions": { "code": "BAD_USER_INPUT" } }]);
                            if !send(&mut sink, protocol, &Outgoing::Error(id, error), limits.send_timeout).await {
                                break Ending::Gone;
                            }
                            continue;
                        }
                        let operation = run_operation(&endpoint, principal.clone(), id.clone(), *request, queue.clone(), slow.clone(), finished_tx.clone());
                        operations.insert(id, operation);
                    }
                }
            }
        }
    };
    for operation in operations.into_values() {
        operation.abort();
    }
    if let Ending::Close(code, reason) = ending {
        let frame = CloseFrame { code, reason: reason.into() };
        let _ = tokio::time::timeout(limits.send_timeout, sink.send(Message::Close(Some(frame)))).await;
    }
}

/// Authenticates the `connection_init` payload. A credential that does not hold refuses
/// the connection; none at all gives an anonymous one whose operations answer
/// UNAUTHENTICATED.
async fn initialise(endpoint: &GraphqlEndpoint, payload: &Value) -> Result<Option<Principal>, String> {
    let header = authorization(payload);
    authenticate(&endpoint.state, header.as_deref()).await.map_err(|_| "Forbidden".to_owned())
}

/// Runs one operation, queueing its results; tells the connection when it ends.
fn run_operation(
    endpoint: &GraphqlEndpoint,
    principal: Option<Principal>,
    id: String,
    request: async_graphql::Request,
    queue: mpsc::Sender<Box<Outgoing>>,
    slow: CancellationToken,
    finished: mpsc::UnboundedSender<String>,
) -> JoinHandle<()> {
    let schema = endpoint.schema.clone();
    let mut request = request;
    if let Some(principal) = principal {
        request = request.data(principal);
    }
    tokio::spawn(async move {
        let mut results = schema.execute_stream(request);
        let mut first = true;
        let mut failed = false;
        while let Some(response) = results.next().await {
            // A response that failed before any field ran (parse, validation, a refused
            // subscription) is an `error` message, which ends the operation.
            let message = if first && crate::http::error_codes::is_request_error(&response) {
                failed = true;
                let errors = serde_json::to_value(&response.errors).unwrap_or(Value::Null);
                Outgoing::Error(id.clone(), errors)
            } else {
                Outgoing::Next(id.clone(), serde_json::to_value(&response).unwrap_or(Value::Null))
            };
            first = false;
            if queue.try_send(Box::new(message)).is_err() {
                slow.cancel();
                return;
            }
            if failed {
                break;
            }
        }
        if !failed && queue.try_send(Box::new(Outgoing::Complete(id.clone()))).is_err() {
            slow.cancel();
        }
        let _ = finished.send(id);
    })
}

/// Writes one message; false when the client is gone or too slow to take it.
async fn send(sink: &mut SplitSink<WebSocket, Message>, protocol: Subprotocol, message: &Outgoing, timeout: Duration) -> bool {
    let frame = Message::Text(message.encode(protocol).into());
    matches!(tokio::time::timeout(timeout, sink.send(frame)).await, Ok(Ok(())))
}

/// The `Authorization` value of a `connection_init` payload, in any letter case, at the
/// top level or under `headers`.
fn authorization(payload: &Value) -> Option<String> {
    let find = |object: &serde_json::Map<String, Value>| {
        object
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
            .and_then(|(_, value)| value.as_str().map(str::to_owned))
    };
    let object = payload.as_object()?;
    find(object).or_else(|| object.get("headers").and_then(Value::as_object).and_then(find))
}
