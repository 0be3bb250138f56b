//! Span export over OTLP/HTTP with protobuf, through the `opentelemetry` SDK's batch
//! processor. That processor exports from a thread of its own, outside Tokio, so the HTTP
//! client here ([`TokioClient`]) hands each request to the runtime it was built on; the
//! exporter crate's bundled clients would be a second reqwest (a blocking one).
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// How long one export may take before it is abandoned (the batch is dropped, not retried
/// forever: traces must never hold the service back).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The running exporter.
pub(super) struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Starts exporting to `endpoint` (a base URL; `/v1/traces` is appended unless the URL
    /// already ends in it) and makes W3C trace context the propagation format.
    pub(super) fn start(endpoint: &str, service_name: &str) -> anyhow::Result<Self> {
        let endpoint = traces_url(endpoint);
        let client = TokioClient {
            client: reqwest::Client::builder().timeout(EXPORT_TIMEOUT).build().context("building the OTLP client")?,
            runtime: tokio::runtime::Handle::try_current().context("trace export needs the Tokio runtime")?,
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(&endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .with_context(|| format!("KFS_OTLP_ENDPOINT {endpoint} cannot be used"))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service_name.to_owned()).build())
            .build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        super::context::mark_exporting();
        Ok(Self { provider })
    }

    /// The layer that turns spans into exported ones: INFO and above everywhere, and this
    /// workspace's DEBUG spans too (requests, operations, resolvers, lifecycle calls),
    /// whatever `RUST_LOG` keeps out of the logs.
    pub(super) fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        let targets = Targets::new()
            .with_default(Level::INFO)
            .with_target("api", Level::DEBUG)
            .with_target("worker", Level::DEBUG)
            .with_target("sqlx", Level::WARN)
            .with_target("sea_orm", Level::WARN);
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("kfs")).with_filter(targets)
    }

    /// Flushes and stops, on a blocking thread: the SDK waits for its export thread, whose
    /// requests run on this runtime.
    pub(super) async fn shutdown(self) {
        let provider = self.provider;
        let stopped = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = stopped {
            tracing::warn!(error = %error, "the trace exporter did not flush cleanly");
        }
    }
}

/// `endpoint` with the traces path, as `OTEL_EXPORTER_OTLP_ENDPOINT` is read.
fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") { base.to_owned() } else { format!("{base}/v1/traces") }
}

/// Sends the exporter's requests with this workspace's reqwest, on the Tokio runtime.
#[derive(Debug)]
struct TokioClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for TokioClient {
    async fn send_bytes(&self, request: http::Request<Bytes>) -> Result<http::Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let response = client.execute(reqwest::Request::try_from(request)?).await?;
            let mut answer = http::Response::builder().status(response.status());
            if let Some(headers) = answer.headers_mut() {
                *headers = response.headers().clone();
            }
            Ok::<_, HttpError>(answer.body(response.bytes().await?)?)
        });
        sent.await?
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_traces_path_is_appended_once() {
        assert_eq!(traces_url("http://collector:4318"), "http://collector:4318/v1/traces");
        assert_eq!(traces_url("http://collector:4318/"), "http://collector:4318/v1/traces");
        assert_eq!(traces_url("http://collector:4318/v1/traces"), "http://collector:4318/v1/traces");
    }
}
