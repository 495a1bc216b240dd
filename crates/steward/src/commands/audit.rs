//! `steward audit verify`: recompute the hash chain end to end.

use crate::DataArgs;
use std::process::ExitCode;
use steward_server::open_store;
use steward_store::{verify_chain, GENESIS_HASH};

/// Events read per page while verifying.
const AUDIT_PAGE_EVENTS: u32 = 5_000;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Verify the audit log's hash chain; exits non-zero on a break.
    Verify {
        #[command(flatten)]
        data: DataArgs,
    },
}

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    let Command::Verify { data } = command;
    let store = open_store(&data.data, data.database.as_deref()).await?;
    let (mut seq, mut hash) = (0_i64, GENESIS_HASH.to_string());
    loop {
        let page = store.audit_events(seq, AUDIT_PAGE_EVENTS).await?;
        if page.is_empty() {
            break;
        }
        match verify_chain(seq, &hash, &page) {
            Ok((s, h)) => (seq, hash) = (s, h),
            Err(e) => {
                println!("audit chain BROKEN: {e}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    println!("audit chain intact: {seq} events, head {hash}");
    Ok(ExitCode::SUCCESS)
}
