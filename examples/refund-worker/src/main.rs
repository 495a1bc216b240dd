//! `steward-refund-worker`: see the crate docs and `--help`.

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "steward-refund-worker",
    version,
    about = "Crash-safe refunds through Steward, with an idempotent continuation"
)]
struct Cli {
    #[command(flatten)]
    args: steward_refund_worker::Args,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STEWARD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(steward_refund_worker::run(cli.args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
