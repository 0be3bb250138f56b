//! One WebSocket connection: the handshake, keep-alives, and every running operation,
//! all polled by the connection's one task. Operations are pulled only as fast as the
//! client takes their messages, so a slow client never makes the server buffer for it:
//! its subscriptions fall behind their topic and catch up from the database later, and a
//! client that stops reading altogether is closed (1013) once a write has waited
//! `send_timeout`. Nobody else waits for it.
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::SinkExt;
use futures_util::stream::{BoxStream, SplitSink, StreamExt};
use serde_json::Value;
use tokio_stream::StreamMap;
use tokio_util::sync::CancellationToken;

use super::protocol::{Incoming, Outgoing, Subprotocol, close, parse};
use crate::auth::{Principal, authenticate};
use crate::http::GraphqlEndpoint;
use crate::http::error_codes::is_request_error;

/// How long the close frame may wait for the client to take it.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Tunables of a connection, from the settings.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// How long a client may wait before `connection_init`.
    pub init_timeout: Duration,
    /// How often the server pings an idle connection.
    pub ping_interval: Duration,
    /// Operations one connection may run at once.
    pub max_subscriptions: usize,
    /// How long one write may wait for the client before it counts as too slow.
    pub send_timeout: Duration,
}

/// Why the connection ends.
enum Ending {
    /// Close with this code and reason.
    Close(u16, String),
    /// The client went away; nothing to send.
    Gone,
}

/// What one write came to.
enum Sent {
    /// The message went out.
    Ok,
    /// The connection failed.
    Gone,
    /// The client did not take the message within `send_timeout`.
    TooSlow,
}

impl Sent {
    /// The ending a failed write means, if it failed.
    fn ending(self) -> Option<Ending> {
        match self {
            Self::Ok => None,
            Self::Gone => Some(Ending::Gone),
            Self::TooSlow => Some(Ending::Close(close::SLOW_CONSUMER, "subscriber too slow to keep up".into())),
        }
    }
}

/// Serves the connection until either side ends it.
pub async fn serve(socket: WebSocket, protocol: Subprotocol, endpoint: GraphqlEndpoint, limits: ConnectionLimits, shutdown: CancellationToken) {
    let (mut sink, mut stream) = socket.split();
    let mut operations: StreamMap<String, BoxStream<'static, Outgoing>> = StreamMap::new();
    // Set by an accepted `connection_init`; the inner `None` is an anonymous connection.
    let mut session: Option<Option<Principal>> = None;
    let mut acknowledged = false;
    let init_deadline = tokio::time::sleep(limits.init_timeout);
    tokio::pin!(init_deadline);
    let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + limits.ping_interval, limits.ping_interval);
    let timeout = limits.send_timeout;

    let ending = loop {
        // Shutdown first: it ends the connection whatever else is ready. Then the client's
        // own messages, so a busy subscription cannot starve a `complete` or a ping. Then
        // results, then housekeeping.
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break Ending::Close(close::GOING_AWAY, "server shutting down".into()),
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
                                if let Some(ending) = send(&mut sink, protocol, Outgoing::Ack, timeout).await.ending() {
                                    break ending;
                                }
                            }
                            Err(reason) => break Ending::Close(close::FORBIDDEN, reason),
                        }
                    }
                    Incoming::Ping(payload) => {
                        if let Some(ending) = send(&mut sink, protocol, Outgoing::Pong(payload), timeout).await.ending() {
                            break ending;
                        }
                    }
                    Incoming::Pong => {}
                    Incoming::Terminate => break Ending::Gone,
                    Incoming::Stop(id) => {
                        // Dropping the stream ends the operation; per the protocol nothing
                        // more is sent for it.
                        operations.remove(&id);
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
                            if let Some(ending) = send(&mut sink, protocol, Outgoing::Error(id, error), timeout).await.ending() {
                                break ending;
                            }
                            continue;
                        }
                        let operation = operation(&endpoint, principal.clone(), id.clone(), *request);
                        operations.insert(id, operation);
                    }
                }
            }
            // A finished operation leaves the map by itself after its last message.
            Some((_, message)) = operations.next(), if !operations.is_empty() => {
                if let Some(ending) = send(&mut sink, protocol, message, timeout).await.ending() {
                    break ending;
                }
            }
            () = &mut init_deadline, if !acknowledged => {
                break Ending::Close(close::INIT_TIMEOUT, "Connection initialisation timeout".into());
            }
            _ = keep_alive.tick(), if acknowledged => {
                if let Some(ending) = send(&mut sink, protocol, Outgoing::KeepAlive, timeout).await.ending() {
                    break ending;
                }
            }
        }
    };
    drop(operations);
    if let Ending::Close(code, reason) = ending {
        // The close frame queues behind whatever the client has not read yet; a slow
        // client that drains its backlog within the grace still learns why it was closed.
        let frame = CloseFrame { code, reason: reason.into() };
        let _ = tokio::time::timeout(CLOSE_GRACE, sink.send(Message::Close(Some(frame)))).await;
    }
}

/// Authenticates the `connection_init` payload. A credential that does not hold refuses
/// the connection; none at all gives an anonymous one whose operations answer
/// UNAUTHENTICATED.
async fn initialise(endpoint: &GraphqlEndpoint, payload: &Value) -> Result<Option<Principal>, String> {
    let header = authorization(payload);
    authenticate(&endpoint.state, header.as_deref()).await.map_err(|_| "Forbidden".to_owned())
}

/// One operation as the stream of messages the client gets: `next` for each result, then
/// `complete`; or a single `error` when it failed before any field ran (parse, validation,
/// a refused subscription), which ends it per the protocol.
fn operation(endpoint: &GraphqlEndpoint, principal: Option<Principal>, id: String, request: async_graphql::Request) -> BoxStream<'static, Outgoing> {
    let mut request = request;
    if let Some(principal) = principal {
        request = request.data(principal);
    }
    let results = endpoint.schema.execute_stream(request);
    futures_util::stream::unfold(Some((results, id, true)), |state| async move {
        let (mut results, id, first) = state?;
        match results.next().await {
            Some(response) if first && is_request_error(&response) => {
                let errors = serde_json::to_value(&response.errors).unwrap_or(Value::Null);
                Some((Outgoing::Error(id, errors), None))
            }
            Some(response) => {
                let payload = serde_json::to_value(&response).unwrap_or(Value::Null);
                Some((Outgoing::Next(id.clone(), payload), Some((results, id, false))))
            }
            None => Some((Outgoing::Complete(id), None)),
        }
    })
    .boxed()
}

/// Writes one message, waiting at most `timeout` for the client to take it.
async fn send(sink: &mut SplitSink<WebSocket, Message>, protocol: Subprotocol, message: Outgoing, timeout: Duration) -> Sent {
    let frame = Message::Text(message.encode(protocol).into());
    match tokio::time::timeout(timeout, sink.send(frame)).await {
        Ok(Ok(())) => Sent::Ok,
        Ok(Err(_)) => Sent::Gone,
        Err(_) => Sent::TooSlow,
    }
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
