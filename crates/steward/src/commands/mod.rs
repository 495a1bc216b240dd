pub mod audit;
pub mod backup;
pub mod bench;
pub mod chaos;
pub mod faults;
pub mod fixture;
pub mod keys;
pub mod mcp;
pub mod operate;
pub mod progress;
pub mod receipt;
pub mod remote;
pub mod serve;
pub mod sim;
pub mod table;
pub mod telemetry;

/// Resolves on SIGINT or SIGTERM, and logs which came.
///
/// The handlers are installed when this is called, not when the future is first polled: a
/// server prints that it is ready before its shutdown task has run, and a SIGTERM sent at once
/// must still find a handler (with none, the default action ends the process with no clean
/// stop). Must be called inside the runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let (interrupt, terminate) = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    #[cfg(not(unix))]
    let (interrupt, terminate) = (Some(()), None::<()>);
    async move {
        let signal = tokio::select! {
            () = received(interrupt) => "SIGINT",
            () = received(terminate) => "SIGTERM",
        };
        tracing::info!(signal, "stop signal received");
    }
}

/// Waits for the next delivery of an installed handler; never resolves when it could not be
/// installed.
#[cfg(unix)]
async fn received(handler: Option<tokio::signal::unix::Signal>) {
    match handler {
        Some(mut handler) => {
            handler.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// Off Unix, Ctrl-C is the only stop signal.
#[cfg(not(unix))]
async fn received(handler: Option<()>) {
    match handler {
        Some(()) => {
            let _ = tokio::signal::ctrl_c().await;
        }
        None => std::future::pending::<()>().await,
    }
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
