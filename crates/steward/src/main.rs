//! `steward`: the command line. Each subcommand is one file under `commands/`.

mod commands;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// mimalloc instead of the system allocator: the request path allocates many small, short-lived
/// values (JSON, rows, futures), and glibc's malloc took about a tenth of the server's CPU under
/// load (bench/PROFILE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "steward",
    version,
    about = "A self-hosted governed execution runtime for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines on stderr are written: `text` (colour only on a terminal) or `json` (one
    /// object per line).
    #[arg(
        long,
        global = true,
        env = "STEWARD_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    log_format: commands::LogFormat,
}

/// Where the embedded store lives; shared by every command that reads or writes it. Only
/// `serve` creates a store there; the other commands refuse a directory that holds none.
#[derive(clap::Args, Clone, Debug)]
pub struct DataArgs {
    /// The data directory (database, master key).
    #[arg(long, env = "STEWARD_DATA", default_value = "./steward-data")]
    data: PathBuf,
    /// Use this PostgreSQL database (postgres://user@host:port/db) instead of the embedded
    /// store; the master key still lives in the data directory (or STEWARD_MASTER_KEY).
    #[arg(long, env = "STEWARD_DATABASE_URL")]
    database: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP API.
    Serve(commands::serve::Args),
    /// Create and list API keys.
    #[command(subcommand)]
    Keys(commands::keys::Command),
    /// Check the audit log.
    #[command(subcommand)]
    Audit(commands::audit::Command),
    /// Check signed receipts offline: `receipt verify FILE --public-key K`.
    #[command(subcommand)]
    Receipt(commands::receipt::Command),
    /// Copy the embedded store while the server runs (SQLite's online backup) to a file that
    /// `serve --data` starts from, as `steward.db` beside the master key.
    Backup(commands::backup::Args),
    /// Run the safe provider fixture (a Stripe-shaped refunds API that counts writes).
    Fixture(commands::fixture::Args),
    /// Kill a worker (or the server) in every crash window, restart it, and count provider writes.
    Chaos(commands::chaos::Args),
    /// Kill the database primary, kill, pause and cut off replicas under load, then check that
    /// nothing acknowledged was lost and nothing was sent twice (and measure RPO and RTO).
    Faults(commands::faults::Args),
    /// A running server's approvals: list, show, approve, deny (operator key from STEWARD_API_KEY).
    #[command(subcommand)]
    Approvals(commands::operate::approvals::Command),
    /// A running server's governed effects: list (--unresolved: the queue), show, reconcile,
    /// resolve.
    #[command(subcommand)]
    Effects(commands::operate::effects::Command),
    /// A running server's invocations: list, show.
    #[command(subcommand)]
    Invocations(commands::operate::invocations::Command),
    /// A running server's actions: list, show (with version history).
    #[command(subcommand)]
    Actions(commands::operate::actions::Command),
    /// The kill switch of the key's environment: halt, resume, show.
    #[command(subcommand)]
    Environment(commands::operate::environment::Command),
    /// Holds on one action or one operation key of the key's environment: add, list, release.
    #[command(subcommand)]
    Holds(commands::operate::holds::Command),
    /// The environment's approval policies as a file: plan, apply (exactly the reviewed plan),
    /// test (decide cases against the file, writing nothing).
    #[command(subcommand)]
    Policies(commands::operate::policies::Command),
    /// Approval channels (Slack, email): add, list, remove.
    #[command(subcommand)]
    Channels(commands::operate::channels::Command),
    /// Webhook dead letters: dlq list, dlq redeliver (one by id, or --subscription all of one).
    #[command(subcommand)]
    Webhooks(commands::operate::webhooks::Command),
    /// Serve MCP on stdio, forwarding to a Steward server (agent key from STEWARD_API_KEY).
    Mcp(commands::mcp::Args),
    /// Load-test the governed write path and report throughput and latency percentiles.
    Bench(commands::bench::Args),
    /// The durable-proxy floor `steward bench` measures (workload `proxy`): a minimal proxy to
    /// the fixture that records each request and answer durably and does nothing else.
    #[command(hide = true)]
    BenchProxy(commands::bench::proxy::Args),
    /// Run the deterministic simulator: --seeds N, or --seed S to replay one and print its log.
    Sim(commands::sim::Args),
    /// The example crash-safe refund worker on the Rust client (what `steward chaos` drives by
    /// default); its key comes from STEWARD_API_KEY, its server from STEWARD_URL.
    RefundWorker(steward_refund_worker::Args),
}

/// An operator command's result as an exit code: 0 done, 1 anything failed (the message on stderr).
async fn operated(
    command: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<std::process::ExitCode> {
    command.await.map(|()| std::process::ExitCode::SUCCESS)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    commands::set_log_format(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => commands::serve::run(args).await,
            Command::Keys(command) => commands::keys::run(command).await,
            Command::Audit(command) => commands::audit::run(command).await,
            Command::Receipt(command) => commands::receipt::run(command).await,
            Command::Backup(args) => commands::backup::run(args).await,
            Command::Fixture(args) => commands::fixture::run(args).await,
            Command::Chaos(args) => commands::chaos::run(args).await,
            Command::Faults(args) => commands::faults::run(args).await,
            Command::Bench(args) => commands::bench::run(args).await,
            Command::BenchProxy(args) => commands::bench::proxy::run(args).await,
            Command::Mcp(args) => commands::mcp::run(args).await,
            Command::Approvals(command) => {
                operated(commands::operate::approvals::run(command)).await
            }
            Command::Effects(command) => operated(commands::operate::effects::run(command)).await,
            Command::Invocations(command) => {
                operated(commands::operate::invocations::run(command)).await
            }
            Command::Actions(command) => operated(commands::operate::actions::run(command)).await,
            Command::Environment(command) => {
                operated(commands::operate::environment::run(command)).await
            }
            Command::Holds(command) => operated(commands::operate::holds::run(command)).await,
            Command::Policies(command) => operated(commands::operate::policies::run(command)).await,
            Command::Channels(command) => operated(commands::operate::channels::run(command)).await,
            Command::Webhooks(command) => operated(commands::operate::webhooks::run(command)).await,
            Command::Sim(args) => commands::sim::run(args).await,
            Command::RefundWorker(args) => steward_refund_worker::run(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
