//! An OpenTelemetry collector for the tests: an HTTP server that accepts OTLP/HTTP trace
//! exports (`POST /v1/traces`, protobuf), decodes them with the protocol's own generated
//! types and keeps every span, as a collector would, for a test to look through.
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One exported span.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The exporting process's `service.name`.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    /// The parent's span id, empty for a root.
    pub parent_span_id: String,
    /// Its attributes, rendered as strings.
    pub attributes: Vec<(String, String)>,
}

impl ReceivedSpan {
    /// The attribute `key`, if the span has it.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.iter().find(|(name, _)| name == key).map(|(_, value)| value.as_str())
    }
}

/// A running receiver; dropping it stops the server.
pub struct OtlpReceiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    server: JoinHandle<()>,
}

impl OtlpReceiver {
    /// Listens on a free port of 127.0.0.1.
    pub async fn start() -> anyhow::Result<Self> {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Router::new().route("/v1/traces", post(export)).with_state(spans.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, spans, server })
    }

    /// The base URL an exporter is configured with (`KFS_OTLP_ENDPOINT`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().map(|spans| spans.clone()).unwrap_or_default()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn export(
    State(spans): State<Arc<Mutex<Vec<ReceivedSpan>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Vec<u8>) {
    if headers.get("content-type").and_then(|value| value.to_str().ok()) != Some("application/x-protobuf") {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new());
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut received = Vec::new();
    for resource in request.resource_spans {
        let resource_attributes = resource.resource.map(|resource| resource.attributes).unwrap_or_default();
        let service = rendered(&resource_attributes)
            .into_iter()
            .find_map(|(key, value)| (key == "service.name").then_some(value))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                received.push(ReceivedSpan {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: rendered(&span.attributes),
                });
            }
        }
    }
    if let Ok(mut spans) = spans.lock() {
        spans.extend(received);
    }
    (StatusCode::OK, ExportTraceServiceResponse::default().encode_to_vec())
}

fn rendered(attributes: &[KeyValue]) -> Vec<(String, String)> {
    let value = |attribute: &KeyValue| match attribute.value.as_ref().and_then(|value| value.value.as_ref()) {
        Some(AnyValue::StringValue(text)) => text.clone(),
        Some(AnyValue::IntValue(number)) => number.to_string(),
        Some(AnyValue::BoolValue(flag)) => flag.to_string(),
        Some(AnyValue::DoubleValue(number)) => number.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    };
    attributes.iter().map(|attribute| (attribute.key.clone(), value(attribute))).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
