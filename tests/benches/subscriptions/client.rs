//! One subscriber: a graphql-transport-ws connection with one `researchTaskProgress`
//! subscription, established once its replayed event arrived, then kept open by a task
//! that timestamps every event it receives.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use uuid::Uuid;

/// How long one connection may take from TCP connect to its replayed event.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Local addresses the clients connect from, so 5,000 connections never run short of
/// ephemeral ports on one source address.
const SOURCE_ADDRESSES: u8 = 8;

/// An event a subscriber received: which task, which sequence, and when.
#[derive(Debug, Clone, Copy)]
pub struct Receipt {
    /// Index of the task in the fixture.
    pub task: usize,
    /// The event's sequence.
    pub sequence: i32,
    /// When the client read it.
    pub at: Instant,
}

/// An open subscription. Dropping it closes the connection.
pub struct Subscriber {
    reader: JoinHandle<()>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Connections that ended while the bench still wanted them.
pub static UNEXPECTED_ENDS: AtomicUsize = AtomicUsize::new(0);

/// Connects as the `n`-th client, subscribes to `task_id` (fixture index `task`) after
/// sequence 0, and waits for the replayed event `replayed`. Later events go to `receipts`.
pub async fn subscribe(
    n: usize,
    server: SocketAddr,
    token: Arc<str>,
    task: usize,
    task_id: Uuid,
    replayed: i32,
    receipts: mpsc::UnboundedSender<Receipt>,
) -> anyhow::Result<Subscriber> {
    let establish = async {
        let mut ws = connect(n, server).await?;
        ws.send(text(json!({ "type": "connection_init", "payload": { "Authorization": format!("Bearer {token}") } })))
            .await?;
        let ack = next_json(&mut ws).await?;
        anyhow::ensure!(ack["type"] == "connection_ack", "expected connection_ack, got {ack}");
        let query = "subscription($task: UUID!) { researchTaskProgress(taskId: $task) { sequence eventType } }";
        let payload = json!({ "query": query, "variables": { "task": task_id } });
        ws.send(text(json!({ "type": "subscribe", "id": "1", "payload": payload }))).await?;
        let first = next_json(&mut ws).await?;
        anyhow::ensure!(sequence_of(&first) == Some(replayed), "expected the replayed event {replayed}, got {first}");
        Ok(ws)
    };
    let ws = tokio::time::timeout(ESTABLISH_TIMEOUT, establish)
        .await
        .map_err(|_| anyhow!("client {n} not established within {ESTABLISH_TIMEOUT:?}"))??;
    Ok(Subscriber { reader: tokio::spawn(read(ws, task, receipts)) })
}

/// A TCP connection from 127.0.0.(1 + n % 8) and the WebSocket handshake on it, with
/// small client buffers so the bench's own memory stays modest.
async fn connect(n: usize, server: SocketAddr) -> anyhow::Result<WebSocketStream<TcpStream>> {
    let socket = TcpSocket::new_v4()?;
    let source = Ipv4Addr::new(127, 0, 0, 1 + (n % usize::from(SOURCE_ADDRESSES)) as u8);
    socket.bind(SocketAddr::new(IpAddr::V4(source), 0)).with_context(|| format!("binding {source}"))?;
    let stream = socket.connect(server).await.with_context(|| format!("connecting to {server}"))?;
    stream.set_nodelay(true)?;
    let mut request = format!("ws://{server}/graphql/ws").into_client_request()?;
    request.headers_mut().insert("Sec-WebSocket-Protocol", HeaderValue::from_static("graphql-transport-ws"));
    let config = WebSocketConfig::default().read_buffer_size(4 * 1024).write_buffer_size(0);
    let (ws, _) = tokio_tungstenite::client_async_with_config(request, stream, Some(config)).await?;
    Ok(ws)
}

/// Reads until the connection ends: answers keep-alive pings, timestamps every event.
async fn read(mut ws: WebSocketStream<TcpStream>, task: usize, receipts: mpsc::UnboundedSender<Receipt>) {
    while let Some(Ok(message)) = ws.next().await {
        let Message::Text(text) = message else { continue };
        let at = Instant::now();
        let Ok(value) = serde_json::from_str::<Value>(text.as_str()) else { break };
        match value["type"].as_str() {
            Some("next") => {
                if let Some(sequence) = sequence_of(&value) {
                    // The receiver is gone outside the latency run: nobody counts then.
                    let _ = receipts.send(Receipt { task, sequence, at });
                }
            }
            Some("ping") => {
                if ws.send(text_of(r#"{"type":"pong"}"#)).await.is_err() {
                    break;
                }
            }
            _ => break,
        }
    }
    UNEXPECTED_ENDS.fetch_add(1, Ordering::Relaxed);
}

/// The next text message, parsed.
async fn next_json(ws: &mut WebSocketStream<TcpStream>) -> anyhow::Result<Value> {
    loop {
        match ws.next().await.context("the server closed the connection")?? {
            Message::Text(text) => return Ok(serde_json::from_str(text.as_str())?),
            Message::Close(frame) => anyhow::bail!("the server closed the connection: {frame:?}"),
            _ => {}
        }
    }
}

/// The sequence of a `next` message's progress event.
fn sequence_of(message: &Value) -> Option<i32> {
    message
        .pointer("/payload/data/researchTaskProgress/sequence")
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
}

fn text(value: Value) -> Message {
    Message::Text(value.to_string().into())
}

fn text_of(value: &str) -> Message {
    Message::Text(value.into())
}
