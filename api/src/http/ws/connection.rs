//! One WebSocket connection: the handshake, keep-alives, and every running operation,
//! all polled by the connection's one task. Operations are pulled only as fast as the
//! client takes their messages, so a slow client never makes the server buffer for it:
//! its subscriptions fall behind their topic and catch up from the database later, and a
//! client that stops reading altogether is closed (1013) once a write has waited
//! `send_timeout`. Nobody else waits for it.
//!
//! Every operation is authorized as if it came over HTTP at that moment: the credential
//! of `connection_init` is authenticated again for each `subscribe`, and when it dies
//! (a JWT or key expiring, a key revoked or rotated in any process) every running
//! operation ends with UNAUTHENTICATED and the connection closes with 4403.
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::stream::{BoxStream, SplitSink, StreamExt};
use futures_util::{FutureExt as _, SinkExt};
use serde_json::{Value, json};
use tokio_stream::StreamMap;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_util::sync::CancellationToken;

use super::admission::{Admission, admit_init, admit_subscribe};
use super::protocol::{Incoming, MAX_INBOUND_BYTES, Outgoing, Subprotocol, close, parse};
use super::upgrade::Socket;
use crate::auth::authenticate;
use crate::error::ApiError;
use crate::graphql::error_codes::is_request_error;
use crate::graphql::{guard, operation_span};
use crate::http::GraphqlEndpoint;
use crate::live::KeyWatchGuard;
use tracing::Instrument as _;
use worker::app::Principal;

/// How long the close frame may wait for the client to take it.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How long the server keeps reading after its close frame, for the client's answer. A
/// socket closed with unread input is reset, and a reset can make the client lose the
/// close frame it had not read yet (RFC 6455 has the server wait for the client's close).
const CLOSE_LINGER: Duration = Duration::from_secs(2);

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
    /// The largest message the server sends; an operation whose result is larger gets an
    /// `error` instead (HTTP refuses such a result the same way).
    pub max_message_bytes: usize,
}

/// Why the connection ends.
enum Ending {
    /// Close with this code and reason.
    Close(u16, String),
    /// The client closed: answer its close frame, as RFC 6455 asks.
    Echo,
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

/// An accepted `connection_init`.
struct Session {
    /// The `Authorization` value it carried, authenticated again for every operation.
    authorization: Option<String>,
    /// Keeps the connection's API key watched for as long as the session lasts.
    _key_watch: Option<KeyWatchGuard>,
    /// Counts the connection against its principal's limit while it lasts.
    _slot: Option<crate::rate::SocketSlot>,
}

/// A future that resolves when the session's credential stops holding.
type CredentialEnd = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The writing half and what every write needs.
struct Writer {
    sink: SplitSink<Socket, Message>,
    protocol: Subprotocol,
    timeout: Duration,
    max_message_bytes: usize,
}

impl Writer {
    /// Writes one message, waiting at most `timeout` for the client to take it.
    async fn send(&mut self, message: Outgoing) -> Sent {
        self.send_text(message.encode(self.protocol)).await
    }

    async fn send_text(&mut self, text: String) -> Sent {
        match tokio::time::timeout(self.timeout, self.sink.send(Message::Text(text.into()))).await {
            Ok(Ok(())) => Sent::Ok,
            Ok(Err(_)) => Sent::Gone,
            Err(_) => Sent::TooSlow,
        }
    }

    /// Writes an operation's message; one too large for a message ends that operation with
    /// an `error` instead. Returns whether the operation was ended here.
    async fn deliver(&mut self, id: &str, message: Outgoing) -> (Sent, bool) {
        let text = message.encode(self.protocol);
        if text.len() <= self.max_message_bytes {
            return (self.send_text(text).await, false);
        }
        let message = format!(
            "the result is {} bytes, more than the {} bytes one message may carry; ask for fewer fields or a smaller page",
            text.len(),
            self.max_message_bytes
        );
        let errors = json!([{ "message": message, "extensions": { "code": "TOO_COMPLEX" } }]);
        (self.send(Outgoing::Error(id.to_owned(), errors)).await, true)
    }
}

/// Serves the connection until either side ends it.
pub async fn serve(
    socket: Socket,
    protocol: Subprotocol,
    endpoint: GraphqlEndpoint,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    request_id: Option<crate::request_id::RequestId>,
) {
    let _counted = crate::gauges::Counted::new("websocket_connections", "");
    let (sink, mut stream) = socket.split();
    let mut writer =
        Writer { sink, protocol, timeout: limits.send_timeout, max_message_bytes: limits.max_message_bytes };
    let mut operations: StreamMap<String, BoxStream<'static, Outgoing>> = StreamMap::new();
    // Set when a frame was refused from its header: the rest of it is still arriving.
    let mut unread = false;
    let mut session: Option<Session> = None;
    let mut credential_end: Option<CredentialEnd> = None;
    let init_deadline = tokio::time::sleep(limits.init_timeout);
    tokio::pin!(init_deadline);
    let mut keep_alive =
        tokio::time::interval_at(tokio::time::Instant::now() + limits.ping_interval, limits.ping_interval);

    let ending = loop {
        // Shutdown first: it ends the connection whatever else is ready. Then a dead
        // credential, so nothing more is served under it. Then the client's own messages,
        // so a busy subscription cannot starve a `complete` or a ping. Then results, then
        // housekeeping.
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break Ending::Close(close::GOING_AWAY, "server shutting down".into()),
            () = ended(&mut credential_end) => {
                break end_every_operation(&mut writer, &mut operations).await.unwrap_or(Ending::Close(close::FORBIDDEN, "Forbidden".into()));
            }
            frame = stream.next() => {
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Binary(_))) => break Ending::Close(close::INVALID_MESSAGE, "Binary frames are not supported".into()),
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Close(_))) => break Ending::Echo,
                    Some(Err(tungstenite::Error::Capacity(_))) => {
                        unread = true;
                        break Ending::Close(close::MESSAGE_TOO_BIG, "Message too big".into());
                    }
                    None | Some(Err(_)) => break Ending::Gone,
                };
                // Read whole (up to the transport's larger limit), so refusing it leaves
                // nothing unread that would reset the connection.
                if text.len() > MAX_INBOUND_BYTES {
                    break Ending::Close(close::MESSAGE_TOO_BIG, "Message too big".into());
                }
                let message = match parse(protocol, text.as_str()) {
                    Ok(message) => message,
                    Err(reason) => break Ending::Close(close::INVALID_MESSAGE, reason),
                };
                match message {
                    Incoming::Init(payload) => {
                        if let Admission::Close(code, reason) = admit_init(session.is_some()) {
                            break Ending::Close(code, reason);
                        }
                        // Boxed: authentication may read the database, and its future
                        // inline would size every connection's task for its whole life.
                        let authorization = authorization(&payload);
                        match Box::pin(authenticate(&endpoint.state.db, &endpoint.state.identity, authorization.as_deref())).await {
                            Ok(principal) => {
                                let slot = match &principal {
                                    Some(principal) => match endpoint.state.rates.open_socket(principal) {
                                        Some(slot) => Some(slot),
                                        None => break Ending::Close(close::TOO_MANY_CONNECTIONS, "Too many connections for this credential".into()),
                                    },
                                    None => None,
                                };
                                let key_watch = principal.as_ref().and_then(|p| p.api_key.as_ref()).map(|key| endpoint.state.live.watch_key(key));
                                credential_end = principal.as_ref().map(|p| credential_ends(p, key_watch.as_ref()));
                                session = Some(Session { authorization, _key_watch: key_watch, _slot: slot });
                                if let Some(ending) = writer.send(Outgoing::Ack).await.ending() {
                                    break ending;
                                }
                            }
                            Err(ApiError::Unavailable(_)) => break Ending::Close(close::TRY_AGAIN_LATER, "service unavailable; try again later".into()),
                            Err(_) => break Ending::Close(close::FORBIDDEN, "Forbidden".into()),
                        }
                    }
                    Incoming::Ping(payload) => {
                        if let Some(ending) = writer.send(Outgoing::Pong(payload)).await.ending() {
                            break ending;
                        }
                    }
                    Incoming::Pong => {}
                    Incoming::Terminate => break Ending::Close(close::NORMAL, String::new()),
                    Incoming::Stop(id) => {
                        // Dropping the stream ends the operation; per the protocol nothing
                        // more is sent for it.
                        operations.remove(&id);
                    }
                    Incoming::Subscribe(id, request) => {
                        let running = operations.contains_key(&id);
                        match admit_subscribe(session.is_some(), &id, running, operations.len(), limits.max_subscriptions) {
                            Admission::Accept => {}
                            Admission::Close(code, reason) => break Ending::Close(code, reason),
                            Admission::Refuse(error) => {
                                if let Some(ending) = writer.send(Outgoing::Error(id, errors(&error, "BAD_USER_INPUT"))).await.ending() {
                                    break ending;
                                }
                                continue;
                            }
                        }
                        let Some(current) = &session else { continue };
                        // As HTTP would, now: a key revoked or rotated since `connection_init`
                        // no longer authenticates, and neither does an expired token.
                        let principal = match Box::pin(authenticate(&endpoint.state.db, &endpoint.state.identity, current.authorization.as_deref())).await {
                            Ok(principal) => principal,
                            Err(error) => {
                                let dead = matches!(error, ApiError::Unauthenticated);
                                let refused = Outgoing::Error(id, errors(&error.to_string(), error.code()));
                                if let Some(ending) = writer.send(refused).await.ending() {
                                    break ending;
                                }
                                if dead {
                                    break end_every_operation(&mut writer, &mut operations).await.unwrap_or(Ending::Close(close::FORBIDDEN, "Forbidden".into()));
                                }
                                continue;
                            }
                        };
                        if let Some(principal) = &principal
                            && let Some(wait) = endpoint.state.rates.request(principal).refused_for()
                        {
                            let error = ApiError::rate_limited(wait);
                            let refused = Outgoing::Error(id, errors_with(&error));
                            if let Some(ending) = writer.send(refused).await.ending() {
                                break ending;
                            }
                            continue;
                        }
                        operations.insert(id.clone(), operation(&endpoint, principal, id, *request, request_id.clone()));
                    }
                }
            }
            // A finished operation leaves the map by itself after its last message.
            Some((id, message)) = operations.next(), if !operations.is_empty() => {
                // A complete or an error is the operation's last message: it leaves the map
                // now, not at the map's next poll, so a client that starts another one as soon
                // as it reads this never finds the old one still counted against the limit.
                let last = matches!(message, Outgoing::Complete(_) | Outgoing::Error(..));
                let (sent, ended) = writer.deliver(&id, message).await;
                if ended || last {
                    operations.remove(&id);
                }
                if let Some(ending) = sent.ending() {
                    break ending;
                }
            }
            () = &mut init_deadline, if session.is_none() => {
                break Ending::Close(close::INIT_TIMEOUT, "Connection initialisation timeout".into());
            }
            _ = keep_alive.tick(), if session.is_some() => {
                if let Some(ending) = writer.send(Outgoing::KeepAlive).await.ending() {
                    break ending;
                }
            }
        }
    };
    drop(operations);
    match ending {
        Ending::Close(code, reason) => {
            // The close frame queues behind whatever the client has not read yet; a slow
            // client that drains its backlog within the grace still learns why it was closed.
            let frame = CloseFrame { code: code.into(), reason: reason.into() };
            let _ = tokio::time::timeout(CLOSE_GRACE, writer.sink.send(Message::Close(Some(frame)))).await;
            if unread {
                // The frame the client is still sending cannot be parsed any more: read
                // and discard the transport's bytes until it goes quiet, so the close
                // frame is not lost to a reset.
                if let Ok(mut socket) = stream.reunite(writer.sink) {
                    super::upgrade::drain(&mut socket, CLOSE_LINGER).await;
                }
                return;
            }
            let answered = async {
                while let Some(Ok(message)) = stream.next().await {
                    if matches!(message, Message::Close(_)) {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(CLOSE_LINGER, answered).await;
        }
        // Reading the client's close frame queued the reply; flushing sends it.
        Ending::Echo => {
            let _ = tokio::time::timeout(CLOSE_GRACE, writer.sink.close()).await;
        }
        Ending::Gone => {}
    }
}

/// Resolves when the session's credential stops holding; never for an anonymous one.
async fn ended(credential_end: &mut Option<CredentialEnd>) {
    match credential_end {
        Some(end) => end.await,
        None => std::future::pending().await,
    }
}

/// When `principal`'s credential stops holding: at its expiry, or when its API key is
/// revoked or rotated.
fn credential_ends(principal: &Principal, key_watch: Option<&KeyWatchGuard>) -> CredentialEnd {
    let expiry = principal.expires_at;
    let revoked = key_watch.map(|watch| watch.dead.clone());
    Box::pin(async move {
        let expired = async {
            match expiry {
                Some(at) => {
                    let left = u64::try_from(at - entity::now_millis()).unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(left)).await;
                }
                None => std::future::pending().await,
            }
        };
        let revoked = async {
            match revoked {
                Some(token) => token.cancelled_owned().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = expired => {}
            () = revoked => {}
        }
    })
}

/// The credential died: every running operation ends with the error HTTP would answer
/// now (a `next` carrying UNAUTHENTICATED, then `complete`), and then the connection
/// closes. An operation that was ending already (its own error sent, its `complete`
/// ready) ends its own way, with no second error. Returns an ending of its own only when
/// a write failed.
async fn end_every_operation(
    writer: &mut Writer,
    operations: &mut StreamMap<String, BoxStream<'static, Outgoing>>,
) -> Option<Ending> {
    /// How many ready messages an operation may still deliver before it is ended.
    const READY_LIMIT: usize = 16;
    let ids: Vec<String> = operations.keys().cloned().collect();
    let unauthenticated =
        json!({ "data": null, "errors": errors(&ApiError::Unauthenticated.to_string(), "UNAUTHENTICATED") });
    for id in ids {
        let Some(mut operation) = operations.remove(&id) else { continue };
        let mut ended = false;
        for _ in 0..READY_LIMIT {
            match operation.next().now_or_never() {
                Some(Some(message)) => {
                    ended = matches!(message, Outgoing::Complete(_) | Outgoing::Error(..));
                    if let Some(ending) = writer.send(message).await.ending() {
                        return Some(ending);
                    }
                    if ended {
                        break;
                    }
                }
                Some(None) => {
                    ended = true;
                    break;
                }
                None => break,
            }
        }
        if ended {
            continue;
        }
        if let Some(ending) = writer.send(Outgoing::Next(id.clone(), unauthenticated.clone())).await.ending() {
            return Some(ending);
        }
        if let Some(ending) = writer.send(Outgoing::Complete(id)).await.ending() {
            return Some(ending);
        }
    }
    None
}

/// A GraphQL error list of one error.
fn errors(message: &str, code: &str) -> Value {
    json!([{ "message": message, "extensions": { "code": code } }])
}

/// An `error` message's payload for an [`ApiError`], with all its extensions.
fn errors_with(error: &ApiError) -> Value {
    use crate::error::ToGql as _;
    let error = error.to_gql().into_server_error(async_graphql::Pos::default());
    json!([error])
}

/// One operation as the stream of messages the client gets: `next` for each result, then
/// `complete`; or a single `error` when it failed before any field ran (the guard, parse,
/// validation, a refused subscription), which ends it per the protocol.
fn operation(
    endpoint: &GraphqlEndpoint,
    principal: Option<Principal>,
    id: String,
    request: async_graphql::Request,
    request_id: Option<crate::request_id::RequestId>,
) -> BoxStream<'static, Outgoing> {
    let mut request = crate::graphql::loaders::attach(request, &endpoint.state.db);
    request = crate::graphql::request_writes::attach(request);
    if let Some(principal) = principal {
        request = request.data(principal);
    }
    if let Some(request_id) = request_id {
        request = request.data(request_id);
    }
    let schema = endpoint.schema.clone();
    let prepared = async move { guard::prepare(request).await };
    futures_util::stream::once(prepared)
        .flat_map(move |prepared| match prepared {
            Ok(mut request) => {
                let span = operation_span(&mut request);
                results(schema.execute_stream(request), id.clone(), span)
            }
            Err(error) => {
                let errors = serde_json::to_value(vec![error]).unwrap_or(Value::Null);
                futures_util::stream::iter([Outgoing::Error(id.clone(), errors)]).boxed()
            }
        })
        .boxed()
}

/// The messages of an executing operation, each result polled inside its span.
fn results(
    results: BoxStream<'static, async_graphql::Response>,
    id: String,
    span: tracing::Span,
) -> BoxStream<'static, Outgoing> {
    futures_util::stream::unfold(Some((results, id, true)), move |state| {
        let span = span.clone();
        async move {
            let (mut results, id, first) = state?;
            match results.next().instrument(span).await {
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
        }
    })
    .boxed()
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
