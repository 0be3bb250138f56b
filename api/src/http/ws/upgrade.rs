//! The HTTP/1.1 WebSocket handshake (RFC 6455 §4.2), done here rather than by axum's
//! `WebSocketUpgrade` for one reason: axum hands over a socket whose transport cannot be
//! reached again, and after a client's frame is refused from its header alone (larger
//! than the transport reads whole) the rest of that frame is still on its way. Closing
//! with it unread makes the kernel reset the connection, and a reset loses the 1009 the
//! client had not read yet. Owning the stream, the connection can read and discard what
//! is left for a short, bounded time after its close frame ([`drain`]).
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt as _;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// The socket a connection is served on.
pub type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// An upgrade request that passed the handshake's checks.
pub struct Upgrade {
    on_upgrade: hyper::upgrade::OnUpgrade,
    key: HeaderValue,
    /// The subprotocols the client offered, in its order of preference.
    offered: Vec<String>,
}

/// Why a request is not a WebSocket upgrade: 400 (426 for another version), as axum
/// answers.
pub struct NotAnUpgrade(StatusCode, &'static str);

impl IntoResponse for NotAnUpgrade {
    fn into_response(self) -> Response {
        let mut response = (self.0, self.1).into_response();
        if self.0 == StatusCode::UPGRADE_REQUIRED {
            response.headers_mut().insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        }
        response
    }
}

fn header_is(headers: &HeaderMap, name: header::HeaderName, value: &str) -> bool {
    headers.get(name).is_some_and(|header| header.as_bytes().eq_ignore_ascii_case(value.as_bytes()))
}

fn header_lists(headers: &HeaderMap, name: header::HeaderName, value: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|header| header.to_str().ok())
        .any(|header| header.split(',').any(|token| token.trim().eq_ignore_ascii_case(value)))
}

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = NotAnUpgrade;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        if parts.method != Method::GET {
            return Err(NotAnUpgrade(StatusCode::METHOD_NOT_ALLOWED, "WebSocket upgrades use GET"));
        }
        if !header_lists(&parts.headers, header::CONNECTION, "upgrade")
            || !header_is(&parts.headers, header::UPGRADE, "websocket")
        {
            return Err(NotAnUpgrade(StatusCode::BAD_REQUEST, "not a WebSocket upgrade request"));
        }
        if !header_is(&parts.headers, header::SEC_WEBSOCKET_VERSION, "13") {
            return Err(NotAnUpgrade(StatusCode::UPGRADE_REQUIRED, "Sec-WebSocket-Version must be 13"));
        }
        let key = parts
            .headers
            .get(header::SEC_WEBSOCKET_KEY)
            .cloned()
            .ok_or(NotAnUpgrade(StatusCode::BAD_REQUEST, "Sec-WebSocket-Key is missing"))?;
        let on_upgrade = parts
            .extensions
            .remove::<hyper::upgrade::OnUpgrade>()
            .ok_or(NotAnUpgrade(StatusCode::BAD_REQUEST, "the connection cannot be upgraded"))?;
        let offered = parts
            .headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|header| header.to_str().ok())
            .flat_map(|header| header.split(','))
            .map(|protocol| protocol.trim().to_owned())
            .filter(|protocol| !protocol.is_empty())
            .collect();
        Ok(Self { on_upgrade, key, offered })
    }
}

impl Upgrade {
    /// The first of `supported` (in the server's order of preference) that the client
    /// offered.
    pub fn choose(&self, supported: &[&'static str]) -> Option<&'static str> {
        supported.iter().copied().find(|protocol| self.offered.iter().any(|offered| offered == protocol))
    }

    /// Answers 101 with `protocol`, and once the connection is upgraded runs `serve` on a
    /// socket with `config`.
    pub fn respond<F, Fut>(self, protocol: Option<&'static str>, config: WebSocketConfig, serve: F) -> Response
    where
        F: FnOnce(Socket) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(self.key.as_bytes());
        let on_upgrade = self.on_upgrade;
        tokio::spawn(async move {
            let Ok(upgraded) = on_upgrade.await else { return };
            let socket = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
            serve(socket).await;
        });
        let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        if let Ok(accept) = HeaderValue::from_str(&accept) {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        }
        if let Some(protocol) = protocol {
            headers.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(protocol));
        }
        response
    }
}

/// The most [`drain`] reads before it gives up: a frame refused from its header may be
/// announced as any size, and what arrives after the limit is not worth reading.
const DRAIN_BYTES: usize = 64 * 1024 * 1024;
/// How long [`drain`] waits for more input before it counts the client as done.
const DRAIN_QUIET: Duration = Duration::from_millis(200);

/// Reads and discards what the client still sends, for at most `linger`, until it goes
/// quiet, closes, or has sent [`DRAIN_BYTES`]; then the socket can be dropped without a
/// reset (which would lose the close frame the client had not read).
pub async fn drain(socket: &mut Socket, linger: Duration) {
    let transport = socket.get_mut();
    let mut scratch = vec![0u8; 64 * 1024];
    let mut read = 0usize;
    let reading = async {
        while read < DRAIN_BYTES {
            match tokio::time::timeout(DRAIN_QUIET, transport.read(&mut scratch)).await {
                Ok(Ok(n)) if n > 0 => read += n,
                _ => return,
            }
        }
    };
    let _ = tokio::time::timeout(linger, reading).await;
}
