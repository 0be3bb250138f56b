//! The two WebSocket subprotocols, parsed into one vocabulary: `graphql-transport-ws`
//! (the current one, spoken to the letter) and the legacy `graphql-ws`
//! (subscriptions-transport-ws).
use async_graphql::{Request, Variables};
use serde::Deserialize;
use serde_json::{Value, json};

/// The subprotocol a connection speaks: async-graphql's names for the two,
/// `GraphQLWS` (`graphql-transport-ws`) and `SubscriptionsTransportWS` (the legacy
/// `graphql-ws`).
pub use async_graphql::http::WebSocketProtocols as Subprotocol;

/// The largest message a client may send; past it the connection closes with 1009. Client
/// messages are operations and their variables: documents come over HTTP.
pub const MAX_INBOUND_BYTES: usize = 64 * 1024;

/// The subprotocol of the negotiated `Sec-WebSocket-Protocol`; with none, the current one.
pub fn negotiated(value: Option<&str>) -> Subprotocol {
    value.and_then(|value| value.parse().ok()).unwrap_or(Subprotocol::GraphQLWS)
}

/// Close codes of graphql-transport-ws (the legacy protocol uses the same ones here).
pub mod close {
    /// The message could not be understood.
    pub const INVALID_MESSAGE: u16 = 4400;
    /// A subscribe came before the connection was acknowledged.
    pub const UNAUTHORIZED: u16 = 4401;
    /// `connection_init` carried a credential that does not hold.
    pub const FORBIDDEN: u16 = 4403;
    /// No `connection_init` within the allowed time.
    pub const INIT_TIMEOUT: u16 = 4408;
    /// A subscribe reused an id that is still running.
    pub const DUPLICATE_ID: u16 = 4409;
    /// A second `connection_init`.
    pub const TOO_MANY_INITS: u16 = 4429;
    /// The principal holds as many connections as `KFS_WS_MAX_CONNECTIONS_PER_PRINCIPAL`
    /// allows (an application code: the protocol defines none for it).
    pub const TOO_MANY_CONNECTIONS: u16 = 4029;
    /// The client reads too slowly to keep up; closing protects everyone else.
    pub const SLOW_CONSUMER: u16 = 1013;
    /// The database is unreachable: the client may try again later (RFC 6455's 1013 too).
    pub const TRY_AGAIN_LATER: u16 = 1013;
    /// A client frame or message was larger than the server accepts (RFC 6455).
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    /// The server is shutting down.
    pub const GOING_AWAY: u16 = 1001;
    /// The client ended the session (legacy `connection_terminate`).
    pub const NORMAL: u16 = 1000;
}

/// A client message, whichever protocol carried it.
#[derive(Debug)]
pub enum Incoming {
    /// `connection_init`, with its payload.
    Init(Value),
    /// `ping` (transport-ws).
    Ping(Option<Value>),
    /// `pong` (transport-ws); nothing to do.
    Pong,
    /// `subscribe` / `start`: run an operation under this id.
    Subscribe(String, Box<Request>),
    /// `complete` / `stop`: the client stops an operation.
    Stop(String),
    /// `connection_terminate` (legacy).
    Terminate,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    id: Option<String>,
    payload: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Operation {
    query: String,
    #[serde(default)]
    variables: Option<Value>,
    #[serde(default)]
    operation_name: Option<String>,
}

/// Parses one text frame; `Err` is a reason for closing with 4400.
pub fn parse(protocol: Subprotocol, text: &str) -> Result<Incoming, String> {
    let envelope: Envelope = serde_json::from_str(text).map_err(|_| "Invalid message received".to_owned())?;
    let id = || match envelope.id.clone() {
        Some(id) if !id.is_empty() => Ok(id),
        _ => Err(format!("\"{}\" message requires a non-empty id", envelope.kind)),
    };
    let message = match (protocol, envelope.kind.as_str()) {
        (_, "connection_init") => Incoming::Init(envelope.payload.clone().unwrap_or(Value::Null)),
        (Subprotocol::GraphQLWS, "ping") => Incoming::Ping(envelope.payload.clone()),
        (Subprotocol::GraphQLWS, "pong") => Incoming::Pong,
        (Subprotocol::GraphQLWS, "subscribe") | (Subprotocol::SubscriptionsTransportWS, "start") => {
            let payload = envelope.payload.clone().ok_or("subscribe requires a payload")?;
            let operation: Operation =
                serde_json::from_value(payload).map_err(|_| "Invalid subscribe payload".to_owned())?;
            let mut request = Request::new(operation.query);
            match operation.variables {
                None | Some(Value::Null) => {}
                Some(variables @ Value::Object(_)) => request = request.variables(Variables::from_json(variables)),
                Some(_) => return Err("variables must be a map".to_owned()),
            }
            if let Some(name) = operation.operation_name {
                request = request.operation_name(name);
            }
            Incoming::Subscribe(id()?, Box::new(request))
        }
        (Subprotocol::GraphQLWS, "complete") | (Subprotocol::SubscriptionsTransportWS, "stop") => Incoming::Stop(id()?),
        (Subprotocol::SubscriptionsTransportWS, "connection_terminate") => Incoming::Terminate,
        (_, other) => return Err(format!("Unknown message type \"{other}\"")),
    };
    Ok(message)
}

/// A server message, encoded for the connection's protocol.
#[derive(Debug)]
pub enum Outgoing {
    /// The connection is accepted.
    Ack,
    /// A keep-alive from the server (`ping`, or `ka` for legacy).
    KeepAlive,
    /// The answer to a client `ping`.
    Pong(Option<Value>),
    /// One result of an operation.
    Next(String, Value),
    /// The operation failed before producing results; it is over.
    Error(String, Value),
    /// The operation is over.
    Complete(String),
}

impl Outgoing {
    /// The JSON text for `protocol`.
    pub fn encode(&self, protocol: Subprotocol) -> String {
        let legacy = protocol == Subprotocol::SubscriptionsTransportWS;
        let message = match self {
            Self::Ack => json!({ "type": "connection_ack" }),
            Self::KeepAlive if legacy => json!({ "type": "ka" }),
            Self::KeepAlive => json!({ "type": "ping" }),
            Self::Pong(Some(payload)) => json!({ "type": "pong", "payload": payload }),
            Self::Pong(None) => json!({ "type": "pong" }),
            Self::Next(id, payload) if legacy => json!({ "type": "data", "id": id, "payload": payload }),
            Self::Next(id, payload) => json!({ "type": "next", "id": id, "payload": payload }),
            // Legacy `error` carries one error object; transport-ws carries the list.
            Self::Error(id, errors) if legacy => {
                json!({ "type": "error", "id": id, "payload": errors.get(0).cloned().unwrap_or(Value::Null) })
            }
            Self::Error(id, errors) => json!({ "type": "error", "id": id, "payload": errors }),
            Self::Complete(id) => json!({ "type": "complete", "id": id }),
        };
        message.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscribe_without_an_id_is_an_invalid_message() {
        let parsed = parse(Subprotocol::GraphQLWS, r#"{"type":"subscribe","payload":{"query":"subscription { x }"}}"#);
        assert!(parsed.is_err());
    }

    #[test]
    fn legacy_start_is_a_subscribe_and_transport_start_is_unknown() {
        let text = r#"{"type":"start","id":"1","payload":{"query":"subscription { x }"}}"#;
        assert!(
            matches!(parse(Subprotocol::SubscriptionsTransportWS, text), Ok(Incoming::Subscribe(id, _)) if id == "1")
        );
        assert!(parse(Subprotocol::GraphQLWS, text).is_err());
    }

    #[test]
    fn next_is_data_in_the_legacy_protocol() {
        let next = Outgoing::Next("7".into(), json!({"data": 1}));
        assert!(next.encode(Subprotocol::SubscriptionsTransportWS).contains("\"data\""));
        assert!(next.encode(Subprotocol::GraphQLWS).contains("\"next\""));
    }
}
