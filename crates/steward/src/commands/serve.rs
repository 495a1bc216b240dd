use crate::DataArgs;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use steward_core::MissingOperationKey;
use steward_server::Integrations;
use steward_server::{
    serve, ConnectionLimits, ConsoleMode, MetricsToken, ServerConfig, ABSENCE_GRACE_MS_DEFAULT,
    BODY_READ_TIMEOUT_MS_DEFAULT, CONNECTIONS_MAX_DEFAULT, DISPATCH_TIMEOUT_MS_DEFAULT,
    HEADER_READ_TIMEOUT_MS_DEFAULT, IDLE_TIMEOUT_MS_DEFAULT, RECONCILE_INTERVAL_MS_DEFAULT,
    REPLICA_LEASE_MS_DEFAULT, REPLICA_LEASE_MS_MIN, SHUTDOWN_GRACE_MS_DEFAULT,
};
use steward_server::{
    McpKeyPolicy as KeyPolicy, McpOAuth, DERIVED_KEY_WINDOW_S_DEFAULT, DERIVED_KEY_WINDOW_S_MAX,
};
use steward_server::{
    RetrySchedule, WEBHOOK_RETRY_ATTEMPTS_DEFAULT, WEBHOOK_RETRY_FIRST_DELAY_MS_DEFAULT,
    WEBHOOK_RETRY_MAX_DELAY_MS_DEFAULT,
};

/// Where `serve` listens unless told otherwise; every client command's default server is this
/// address (`remote::DEFAULT_SERVER`), so a quickstart's server and its operator commands meet.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4000";

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    data: DataArgs,
    /// The address to listen on.
    #[arg(long, env = "STEWARD_LISTEN", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// The console's base URL as people reach it (e.g. https://steward.example.com), for the
    /// links approval channels send; default: http:// and the listen address.
    #[arg(long, env = "STEWARD_PUBLIC_URL")]
    public_url: Option<String>,
    /// Allow http and loopback/private destinations (for local fixtures only).
    #[arg(long, env = "STEWARD_ALLOW_INSECURE_DESTINATIONS", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false)]
    allow_insecure_destinations: bool,
    /// The provider call deadline in milliseconds; past it an attempt is `unknown`.
    #[arg(long, env = "STEWARD_DISPATCH_TIMEOUT_MS", default_value_t = DISPATCH_TIMEOUT_MS_DEFAULT)]
    dispatch_timeout_ms: u64,
    /// How long after an attempt's deadline "not found at the provider" stays inconclusive.
    #[arg(long, env = "STEWARD_ABSENCE_GRACE_MS", default_value_t = ABSENCE_GRACE_MS_DEFAULT)]
    absence_grace_ms: u64,
    /// The background reconciler's tick in milliseconds; 0 turns it off.
    #[arg(long, env = "STEWARD_RECONCILE_INTERVAL_MS", default_value_t = RECONCILE_INTERVAL_MS_DEFAULT)]
    reconcile_interval_ms: u64,
    /// With --database: how long a replica may go without a heartbeat (sent every fifth of it)
    /// before the others take over its in-flight work, in milliseconds.
    #[arg(long, env = "STEWARD_LEASE_MS", default_value_t = REPLICA_LEASE_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(REPLICA_LEASE_MS_MIN..))]
    lease_ms: u64,
    /// How long a client has to send a request's headers, in milliseconds, counted from its
    /// connection (first request) or from the first byte after an idle wait.
    #[arg(long, env = "STEWARD_HEADER_READ_TIMEOUT_MS", default_value_t = HEADER_READ_TIMEOUT_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    header_read_timeout_ms: u64,
    /// How long a request's body may take to arrive once its headers are read, in
    /// milliseconds.
    #[arg(long, env = "STEWARD_BODY_READ_TIMEOUT_MS", default_value_t = BODY_READ_TIMEOUT_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    body_read_timeout_ms: u64,
    /// How long a keep-alive connection may wait for its next request, in milliseconds.
    #[arg(long, env = "STEWARD_IDLE_TIMEOUT_MS", default_value_t = IDLE_TIMEOUT_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_ms: u64,
    /// How many client connections may be open at once, per listener. At the cap, a new
    /// connection closes the oldest one with no request in flight. Keep it well under the
    /// process's file limit (`ulimit -n`).
    #[arg(long, env = "STEWARD_CONNECTIONS_MAX", default_value_t = CONNECTIONS_MAX_DEFAULT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    connections_max: usize,
    /// Serve `/metrics` on the main listener to `Authorization: Bearer <token>` (at least 16
    /// characters). Prefer the environment variable: flags show in the process list.
    #[arg(long, env = "STEWARD_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
    /// Serve `/metrics` alone on this second address (the token is required there too when
    /// set). A non-loopback address requires --metrics-token.
    #[arg(long, env = "STEWARD_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// A host name `/mcp` answers besides loopback names and the listen address (repeatable;
    /// e.g. the public name of a deployment behind a proxy). Any other `Host` is refused (403)
    /// against DNS rebinding.
    #[arg(
        long = "mcp-allowed-host",
        env = "STEWARD_MCP_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    mcp_allowed_hosts: Vec<String>,
    /// What an MCP call of a governed action without an operation key does, for actions that
    /// do not say (`mcpMissingOperationKey`): `refuse` it with an instruction, or `derive` a key
    /// from (agent key, action version, arguments), so an identical call within
    /// --mcp-derived-key-window-s is taken for a retry.
    #[arg(
        long,
        env = "STEWARD_MCP_MISSING_OPERATION_KEY",
        value_enum,
        default_value = "refuse"
    )]
    mcp_missing_operation_key: MissingKey,
    /// How long an identical call without an operation key is taken for a retry of the first,
    /// in seconds (1 to 86400).
    #[arg(
        long,
        env = "STEWARD_MCP_DERIVED_KEY_WINDOW_S",
        default_value_t = DERIVED_KEY_WINDOW_S_DEFAULT,
        value_parser = clap::value_parser!(u64).range(1..=DERIVED_KEY_WINDOW_S_MAX)
    )]
    mcp_derived_key_window_s: u64,
    /// A JSON file that lets `/mcp` accept OAuth access tokens (JWT) beside agent keys: this
    /// resource's URL, the issuers it trusts (JWKS), the scopes it requires, and which
    /// environment and role each token subject acts as. See docs/DECISIONS.md, "MCP
    /// authorization". Without it, `/mcp` takes agent keys only.
    #[arg(long, env = "STEWARD_MCP_OAUTH")]
    mcp_oauth: Option<std::path::PathBuf>,
    /// Serve the operator console at /console/ without its write controls: every write but
    /// sign-in and sign-out is refused (403).
    #[arg(long, env = "STEWARD_CONSOLE_READ_ONLY")]
    console_read_only: bool,
    /// A JSON catalog (`{"integrations": [...]}`) of the integrations accounts can be connected
    /// for; it replaces the built-in one (Stripe and GitHub API keys). See docs/DECISIONS.md.
    #[arg(long, env = "STEWARD_INTEGRATIONS")]
    integrations: Option<std::path::PathBuf>,
    /// Export Steward's spans (requests, store commits, dispatches) and ingested run spans to
    /// this OpenTelemetry collector over OTLP/HTTP (protobuf), e.g. `http://127.0.0.1:4318`.
    /// Without it, `OTEL_EXPORTER_OTLP_ENDPOINT` is read; with neither, nothing is exported.
    #[arg(long, env = "STEWARD_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// Attempts at one webhook event (the first included) before it goes to the dead-letter
    /// list, 1 to 100. The default, with the default delays, spans about three days.
    #[arg(long, env = "STEWARD_WEBHOOK_RETRY_ATTEMPTS", default_value_t = WEBHOOK_RETRY_ATTEMPTS_DEFAULT)]
    webhook_retry_attempts: u32,
    /// The wait after a webhook delivery's first failure, in milliseconds; each further
    /// failure doubles it, up to --webhook-retry-max-delay-ms.
    #[arg(long, env = "STEWARD_WEBHOOK_RETRY_FIRST_DELAY_MS", default_value_t = WEBHOOK_RETRY_FIRST_DELAY_MS_DEFAULT)]
    webhook_retry_first_delay_ms: u64,
    /// The longest wait between two attempts at a webhook event, in milliseconds.
    #[arg(long, env = "STEWARD_WEBHOOK_RETRY_MAX_DELAY_MS", default_value_t = WEBHOOK_RETRY_MAX_DELAY_MS_DEFAULT)]
    webhook_retry_max_delay_ms: u64,
    /// On SIGTERM or SIGINT: how long requests and provider calls in flight get to finish and
    /// record their answers, in milliseconds (new connections are refused at once). Keep it
    /// above --dispatch-timeout-ms, and the supervisor's stop timeout above it.
    #[arg(long, env = "STEWARD_SHUTDOWN_GRACE_MS", default_value_t = SHUTDOWN_GRACE_MS_DEFAULT)]
    shutdown_grace_ms: u64,
}

/// `--mcp-missing-operation-key`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum MissingKey {
    Refuse,
    Derive,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let tracer = super::telemetry::endpoint(args.otlp_endpoint.clone())
        .map(|e| super::telemetry::start(&e))
        .transpose()?;
    super::init_logging_with(tracer);
    let config = ServerConfig {
        data_dir: args.data.data,
        database: args.data.database,
        listen: args.listen,
        public_url: args.public_url,
        allow_insecure_destinations: args.allow_insecure_destinations,
        dispatch_timeout: Duration::from_millis(args.dispatch_timeout_ms),
        absence_grace: Duration::from_millis(args.absence_grace_ms),
        reconcile_interval: (args.reconcile_interval_ms > 0)
            .then(|| Duration::from_millis(args.reconcile_interval_ms)),
        lease: Duration::from_millis(args.lease_ms),
        connection_limits: ConnectionLimits {
            header_read_timeout: Duration::from_millis(args.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(args.body_read_timeout_ms),
            idle_timeout: Duration::from_millis(args.idle_timeout_ms),
            connections_max: args.connections_max,
        },
        metrics_token: args
            .metrics_token
            .as_deref()
            .map(MetricsToken::new)
            .transpose()?,
        metrics_listen: args.metrics_listen,
        mcp_allowed_hosts: args.mcp_allowed_hosts,
        mcp_keys: KeyPolicy {
            default: match args.mcp_missing_operation_key {
                MissingKey::Refuse => MissingOperationKey::Refuse,
                MissingKey::Derive => MissingOperationKey::Derive,
            },
            window: Duration::from_secs(args.mcp_derived_key_window_s),
        },
        mcp_oauth: args
            .mcp_oauth
            .as_deref()
            .map(McpOAuth::load)
            .transpose()?
            .map(std::sync::Arc::new),
        console: if args.console_read_only {
            ConsoleMode::ReadOnly
        } else {
            ConsoleMode::ReadWrite
        },
        integrations: match &args.integrations {
            Some(path) => Integrations::load(path).map_err(anyhow::Error::msg)?,
            None => Integrations::builtin(),
        },
        webhook_retry: RetrySchedule::new(
            args.webhook_retry_attempts,
            args.webhook_retry_first_delay_ms,
            args.webhook_retry_max_delay_ms,
        )?,
        shutdown_grace: Duration::from_millis(args.shutdown_grace_ms),
    };
    let served = serve(config, super::shutdown_signal()).await;
    super::telemetry::shutdown();
    served?;
    Ok(ExitCode::SUCCESS)
}
