//! `steward fixture`: the safe provider fixture, for tests, demos and `steward chaos`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use steward_fixture::{serve, FixtureConfig};

#[derive(clap::Args)]
pub struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:4010")]
    listen: SocketAddr,
    /// Keep committed writes in this file so they survive the fixture's restart.
    #[arg(long)]
    state: Option<PathBuf>,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::init_logging();
    serve(
        FixtureConfig {
            listen: args.listen,
            state_file: args.state,
        },
        super::shutdown_signal(),
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}
