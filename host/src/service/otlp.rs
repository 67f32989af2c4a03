//! Exporting the host's spans with OpenTelemetry (OTLP over HTTP, protobuf) when
//! `host serve` is given an endpoint (`--otlp-endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT`).
//!
//! Spans reach OpenTelemetry through the `tracing` ecosystem (`tracing-opentelemetry`);
//! only the host's own spans at info and above are exported (an attempt's, whose remote
//! parent is its run's trace context: see `trace::attempt_span`), whatever the log filter.
//! Spans are batched on the batch processor's own thread and sent by the host's own
//! async HTTP client on the host's runtime (no second, blocking client); what is still
//! buffered is sent at shutdown.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("the OTLP endpoint must be an http or https URL")]
    Endpoint,
    #[error("cannot set up the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("cannot set up the OTLP exporter's HTTP client")]
    Client,
}

/// Longest one export may take, connection included.
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The exporter of one process; `shutdown` sends what is left.
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Exports to `endpoint`, the collector's base URL (`/v1/traces` is added, as for
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`), sending on `runtime`, which must outlive
    /// [`Exporter::shutdown`].
    pub fn start(endpoint: &str, runtime: tokio::runtime::Handle) -> Result<Exporter, OtlpError> {
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|_| OtlpError::Client)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(OnRuntime { client, runtime })
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(traces_url(endpoint)?)
            .build()?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("jobhost");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        Ok(Exporter { provider })
    }

    /// The layer that hands the host's spans to the exporter.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("jobhost"))
            .with_filter(Targets::new().with_target("jobhost", tracing::Level::INFO))
    }

    /// Sends the spans still buffered and stops the exporter: the last thing the process
    /// does (it blocks until the batch is sent or times out).
    pub fn shutdown(self) {
        if self.provider.shutdown().is_err() {
            eprintln!("warning: the OTLP exporter did not send every span before exiting");
        }
    }
}

/// The host's async client, driven on the host's runtime: the batch processor's thread
/// has no runtime of its own, so each request runs as a task there and the thread only
/// waits for its answer.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let response = client.execute(reqwest::Request::try_from(request)?).await?;
            let mut answer = Response::builder().status(response.status());
            if let Some(headers) = answer.headers_mut() {
                *headers = response.headers().clone();
            }
            let body = response.bytes().await?;
            Ok::<_, HttpError>(answer.body(body)?)
        });
        sent.await?
    }
}

fn traces_url(endpoint: &str) -> Result<String, OtlpError> {
    let base = url::Url::parse(endpoint).map_err(|_| OtlpError::Endpoint)?;
    if !matches!(base.scheme(), "http" | "https") || base.host().is_none() {
        return Err(OtlpError::Endpoint);
    }
    Ok(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_to_the_base() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example/base/").unwrap(),
            "https://otel.example/base/v1/traces"
        );
        for bad in ["", "127.0.0.1:4318", "ftp://x/", "file:///tmp/x"] {
            assert!(traces_url(bad).is_err(), "{bad:?}");
        }
    }
}
