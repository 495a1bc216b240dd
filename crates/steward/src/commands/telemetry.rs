//! OpenTelemetry export over OTLP/HTTP (protobuf), when `steward serve --otlp-endpoint` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` names a collector.
//!
//! Steward's own `tracing` spans (the request, the invoke, its store commit and its dispatch)
//! reach the collector through a `tracing-opentelemetry` layer; ingested run spans are exported
//! by the server through the global tracer provider set here. Export never blocks or fails a
//! request: spans go to the batch processor's bounded queue ([`OTLP_QUEUE_SPANS_MAX`]), which a
//! thread of its own drains; when the queue is full new spans are dropped, and the processor
//! counts and reports the drops in its own log at shutdown. A collector that is down costs
//! each batch one failed export after [`OTLP_EXPORT_TIMEOUT_MS`].

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use std::sync::OnceLock;
use std::time::Duration;

/// The most spans waiting for export; past it new spans are dropped. At a few spans per
/// request this holds a few seconds of a busy server's work while a collector restarts.
pub const OTLP_QUEUE_SPANS_MAX: usize = 4_096;
/// The most spans in one export request.
pub const OTLP_BATCH_SPANS_MAX: usize = 512;
/// How long the processor waits before exporting a partial batch, in milliseconds.
pub const OTLP_SCHEDULE_DELAY_MS: u64 = 1_000;
/// How long one export may take before it is abandoned, in milliseconds.
pub const OTLP_EXPORT_TIMEOUT_MS: u64 = 5_000;

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The endpoint to export to: the flag, else `OTEL_EXPORTER_OTLP_ENDPOINT`; blank is none.
pub fn endpoint(flag: Option<String>) -> Option<String> {
    flag.or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
}

/// The traces URL of an OTLP/HTTP endpoint: `<endpoint>/v1/traces`, unless it names a path.
fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    if trimmed.ends_with("/v1/traces") {
        trimmed.to_string()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

/// Builds the exporter and the provider, sets the global provider, and answers the tracer the
/// `tracing` layer uses. Built on a thread of its own: the blocking HTTP client may not be
/// made inside the async runtime.
pub fn start(endpoint: &str) -> anyhow::Result<opentelemetry_sdk::trace::Tracer> {
    let url = traces_url(endpoint);
    let provider = std::thread::spawn(move || -> anyhow::Result<SdkTracerProvider> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(Duration::from_millis(OTLP_EXPORT_TIMEOUT_MS))
            .with_http_client(
                reqwest::blocking::Client::builder()
                    .no_proxy()
                    .timeout(Duration::from_millis(OTLP_EXPORT_TIMEOUT_MS))
                    .build()?,
            )
            .build()?;
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(OTLP_QUEUE_SPANS_MAX)
            .with_max_export_batch_size(OTLP_BATCH_SPANS_MAX)
            .with_scheduled_delay(Duration::from_millis(OTLP_SCHEDULE_DELAY_MS))
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build();
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("steward")
            .build();
        Ok(SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource)
            .build())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the OTLP exporter could not be built"))??;
    let tracer = provider.tracer("steward");
    opentelemetry::global::set_tracer_provider(provider.clone());
    let _ = PROVIDER.set(provider);
    Ok(tracer)
}

/// Exports what is queued and stops the exporter; at most one export timeout. Called once the
/// server has stopped, off the async runtime (the processor's shutdown blocks).
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        let provider = provider.clone();
        let _ = std::thread::spawn(move || provider.shutdown()).join();
    }
}
