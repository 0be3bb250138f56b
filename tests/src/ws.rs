//! A small GraphQL-over-WebSocket client for tests, on tokio-tungstenite: the
//! `graphql-transport-ws` messages as a test needs them (init, subscribe, next, error,
//! complete, ping/pong) and raw frames for everything else (the legacy `graphql-ws`
//! protocol, malformed input). It never answers or hides anything on its own beyond
//! WebSocket-level pings, so a test sees every message and close code the server sends.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The current subprotocol, which the server speaks to the letter.
pub const TRANSPORT_WS: &str = "graphql-transport-ws";
/// The legacy subprotocol of subscriptions-transport-ws.
pub const LEGACY_GRAPHQL_WS: &str = "graphql-ws";

/// How long a test waits for one message before it fails instead of hanging. Generous:
/// it bounds a broken server, it is not how long a working one takes.
pub const MESSAGE_DEADLINE: Duration = Duration::from_secs(10);

/// What arrived on the socket.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A text frame, parsed as JSON.
    Message(Value),
    /// The connection closed: the server's close code and reason, or `None` when it went
    /// away without a close frame.
    Closed(Option<u16>, String),
}

/// A `graphql-transport-ws` message about one operation, or the end of the connection.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `next`: one execution result (`data` and/or `errors`) of the operation.
    Next(String, Value),
    /// `error`: the operation failed before producing results; it is over.
    Error(String, Value),
    /// `complete`: the operation is over.
    Complete(String),
    /// The connection closed (see [`Frame::Closed`]).
    Closed(Option<u16>, String),
}

/// One client connection to `/graphql/ws`.
pub struct WsClient {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl WsClient {
    /// Opens a connection asking for `subprotocol`; sends nothing yet.
    pub async fn connect(url: &str, subprotocol: &str) -> anyhow::Result<Self> {
        let mut request = url.into_client_request().with_context(|| format!("building a request for {url}"))?;
        request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_str(subprotocol)?);
        // Nagle off, as browsers have it: a small message right after another would
        // otherwise wait for the server's delayed acknowledgement (up to 40 ms).
        let (socket, response) = tokio_tungstenite::connect_async_with_config(request, None, true)
            .await
            .with_context(|| format!("opening a WebSocket to {url}"))?;
        let chosen = response.headers().get("sec-websocket-protocol").and_then(|value| value.to_str().ok());
        ensure!(chosen == Some(subprotocol), "asked for {subprotocol}, the server chose {chosen:?}");
        Ok(Self { socket })
    }

    /// Opens a `graphql-transport-ws` connection whose socket has a tiny receive buffer, so
    /// that once the test stops reading, the server's writes block after little data.
    pub async fn connect_with_small_receive_buffer(url: &str) -> anyhow::Result<Self> {
        let mut request = url.into_client_request().with_context(|| format!("building a request for {url}"))?;
        request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(TRANSPORT_WS));
        let host = request.uri().host().context("a WebSocket URL without a host")?;
        let port = request.uri().port_u16().context("a WebSocket URL without a port")?;
        let address: std::net::SocketAddr =
            format!("{host}:{port}").parse().context("a WebSocket URL whose host is not an IP")?;
        let socket = tokio::net::TcpSocket::new_v4().context("creating a socket")?;
        socket.set_recv_buffer_size(4096).context("shrinking the receive buffer")?;
        let stream = socket.connect(address).await.with_context(|| format!("connecting to {address}"))?;
        let (socket, _) = tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(stream))
            .await
            .with_context(|| format!("opening a WebSocket to {url}"))?;
        Ok(Self { socket })
    }

    /// Opens a `graphql-transport-ws` connection and has it acknowledged, presenting
    /// `bearer` (a JWT or an API key) in the `connection_init` payload.
    pub async fn connect_and_init(url: &str, bearer: Option<&str>) -> anyhow::Result<Self> {
        let mut client = Self::connect(url, TRANSPORT_WS).await?;
        client.init(bearer).await?;
        Ok(client)
    }

    /// Sends `connection_init` and waits for `connection_ack`.
    pub async fn init(&mut self, bearer: Option<&str>) -> anyhow::Result<()> {
        let payload = bearer.map_or_else(|| json!({}), |bearer| json!({ "Authorization": format!("Bearer {bearer}") }));
        self.send(json!({ "type": "connection_init", "payload": payload })).await?;
        match self.recv().await? {
            Frame::Message(message) if message["type"] == "connection_ack" => Ok(()),
            other => bail!("expected connection_ack, got {other:?}"),
        }
    }

    /// Starts operation `id` (`subscribe`).
    pub async fn subscribe(&mut self, id: &str, query: &str, variables: Value) -> anyhow::Result<()> {
        self.send(json!({ "type": "subscribe", "id": id, "payload": { "query": query, "variables": variables } })).await
    }

    /// Stops operation `id` from the client's side (`complete`).
    pub async fn complete(&mut self, id: &str) -> anyhow::Result<()> {
        self.send(json!({ "type": "complete", "id": id })).await
    }

    /// Sends one JSON message as a text frame.
    pub async fn send(&mut self, message: Value) -> anyhow::Result<()> {
        self.send_text(&message.to_string()).await
    }

    /// Sends one text frame as given (for malformed messages).
    pub async fn send_text(&mut self, text: &str) -> anyhow::Result<()> {
        self.socket.send(Message::text(text)).await.context("sending a WebSocket frame")
    }

    /// The next frame, within [`MESSAGE_DEADLINE`].
    pub async fn recv(&mut self) -> anyhow::Result<Frame> {
        self.recv_within(MESSAGE_DEADLINE).await
    }

    /// The next text frame or the close, within `deadline`. WebSocket-level pings are
    /// answered by tungstenite and skipped here, as are pongs.
    pub async fn recv_within(&mut self, deadline: Duration) -> anyhow::Result<Frame> {
        let read = async {
            loop {
                let frame = match self.socket.next().await {
                    None => return Ok(Frame::Closed(None, "the connection ended".to_owned())),
                    Some(Err(error)) => return Ok(Frame::Closed(None, error.to_string())),
                    Some(Ok(frame)) => frame,
                };
                return match frame {
                    Message::Text(text) => serde_json::from_str(text.as_str())
                        .map(Frame::Message)
                        .with_context(|| format!("a frame that is not JSON: {text}")),
                    Message::Close(Some(close)) => {
                        Ok(Frame::Closed(Some(u16::from(close.code)), close.reason.to_string()))
                    }
                    Message::Close(None) => Ok(Frame::Closed(None, "closed without a code".to_owned())),
                    Message::Ping(_) | Message::Pong(_) => continue,
                    Message::Binary(_) | Message::Frame(_) => Err(anyhow!("an unexpected binary frame")),
                };
            }
        };
        tokio::time::timeout(deadline, read).await.with_context(|| format!("nothing arrived within {deadline:?}"))?
    }

    /// The next message about an operation (or the close), answering the server's
    /// keep-alive `ping`s with `pong` on the way, as a real client does.
    pub async fn next_event(&mut self) -> anyhow::Result<Event> {
        loop {
            let message = match self.recv().await? {
                Frame::Closed(code, reason) => return Ok(Event::Closed(code, reason)),
                Frame::Message(message) => message,
            };
            let id = || message["id"].as_str().map(str::to_owned).with_context(|| format!("no id in {message}"));
            return Ok(match message["type"].as_str() {
                Some("ping") => {
                    self.send(json!({ "type": "pong" })).await?;
                    continue;
                }
                Some("pong") => continue,
                Some("next") => Event::Next(id()?, message["payload"].clone()),
                Some("error") => Event::Error(id()?, message["payload"].clone()),
                Some("complete") => Event::Complete(id()?),
                _ => bail!("an unexpected message: {message}"),
            });
        }
    }

    /// Waits for the server to close the connection and returns its close code and
    /// reason; any message before the close fails.
    pub async fn expect_close(&mut self, deadline: Duration) -> anyhow::Result<(u16, String)> {
        match self.recv_within(deadline).await? {
            Frame::Closed(Some(code), reason) => Ok((code, reason)),
            other => bail!("expected a close frame with a code, got {other:?}"),
        }
    }

    /// Every `next` payload of operation `id` until its `complete`. An `error` message, a
    /// message of another operation or the connection closing fails.
    pub async fn collect(&mut self, id: &str) -> anyhow::Result<Vec<Value>> {
        let mut all = self.collect_all(&[id]).await?;
        Ok(all.remove(id).unwrap_or_default())
    }

    /// Every `next` payload of each of the `ids`, until all of them completed; the
    /// operations may interleave.
    pub async fn collect_all(&mut self, ids: &[&str]) -> anyhow::Result<BTreeMap<String, Vec<Value>>> {
        let mut running: BTreeSet<String> = ids.iter().map(|id| (*id).to_owned()).collect();
        let mut payloads: BTreeMap<String, Vec<Value>> = running.iter().map(|id| (id.clone(), Vec::new())).collect();
        while !running.is_empty() {
            match self.next_event().await? {
                Event::Next(id, payload) if running.contains(&id) => payloads.entry(id).or_default().push(payload),
                Event::Complete(id) if running.remove(&id) => {}
                other => bail!("while collecting {running:?}: {other:?}"),
            }
        }
        Ok(payloads)
    }

    /// Sends a close frame with `code` and `reason` and keeps the connection, so the test
    /// can read what the server answers.
    pub async fn close_with(&mut self, code: u16, reason: &str) -> anyhow::Result<()> {
        use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
        let frame = CloseFrame { code: CloseCode::from(code), reason: reason.to_owned().into() };
        self.socket.send(Message::Close(Some(frame))).await.context("sending a close frame")
    }

    /// Closes the connection politely (close frame 1000).
    pub async fn close(mut self) -> anyhow::Result<()> {
        self.socket.close(None).await.context("closing the WebSocket")
    }
}

/// The `sequence` of a `next` payload's `field` (`researchTaskProgress`, …); a payload
/// with errors fails, naming them.
pub fn sequence_of(payload: &Value, field: &str) -> anyhow::Result<i64> {
    ensure!(payload.get("errors").is_none(), "the operation reported errors: {payload}");
    payload
        .pointer(&format!("/data/{field}/sequence"))
        .and_then(Value::as_i64)
        .with_context(|| format!("no {field}.sequence in {payload}"))
}

/// The `extensions.code` of a payload's first error.
pub fn error_code(payload: &Value) -> Option<&str> {
    payload.pointer("/errors/0/extensions/code").and_then(Value::as_str)
}
