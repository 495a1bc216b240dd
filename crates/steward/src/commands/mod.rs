pub mod audit;
pub mod backup;
pub mod bench;
pub mod chaos;
pub mod fixture;
pub mod keys;
pub mod mcp;
pub mod operate;
pub mod remote;
pub mod serve;
pub mod sim;
pub mod table;
pub mod telemetry;

/// Resolves on SIGINT or SIGTERM, and logs which came.
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    let signal = tokio::select! {
        () = interrupt => "SIGINT",
        () = terminate => "SIGTERM",
    };
    tracing::info!(signal, "stop signal received");
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event; colour only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// Chooses the format [`init_logging`] uses; the first choice wins.
pub fn set_log_format(format: LogFormat) {
    let _ = LOG_FORMAT.set(format);
}

/// Logs go to stderr; stdout is for what a command prints on purpose. Colour codes only reach a
/// terminal: a file or a pipe gets plain text (or JSON with `--log-format json`).
pub fn init_logging() {
    init_logging_with(None);
}

/// [`init_logging`], and the spans also exported over OTLP by `tracer` when given
/// (`telemetry.rs`).
pub fn init_logging_with(tracer: Option<opentelemetry_sdk::trace::Tracer>) {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_env("STEWARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match LOG_FORMAT.get().copied().unwrap_or_default() {
        LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let otel = tracer.map(|t| tracing_opentelemetry::layer().with_tracer(t));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init();
}
