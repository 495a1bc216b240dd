//! `steward audit verify`: recompute the sealed hash chain end to end, and each unsealed
//! event's own hash.

use crate::DataArgs;
use std::process::ExitCode;
use steward_server::open_existing_store;
use steward_store::verify_log;

/// Events read per page while verifying.
const AUDIT_PAGE_EVENTS: u32 = 5_000;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Verify the audit log: the sealed hash chain from the first event to the stored head, and
    /// each event not sealed yet by its own hash; exits non-zero on a break.
    Verify {
        #[command(flatten)]
        data: DataArgs,
    },
}

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    let Command::Verify { data } = command;
    let store = open_existing_store(&data.data, data.database.as_deref()).await?;
    match verify_log(store.as_ref(), AUDIT_PAGE_EVENTS, |_| {}).await? {
        Ok(report) => {
            let total = report.sealed as u64 + report.unsealed;
            print!(
                "audit chain intact: {total} events ({} sealed, head {}",
                report.sealed, report.head
            );
            match report.oldest_unsealed_at {
                Some(oldest) => println!(
                    "; {} not sealed yet, each verified by its own hash, the oldest written at {})",
                    report.unsealed,
                    oldest.to_rfc3339()
                ),
                None => println!("; none unsealed)"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("audit chain BROKEN: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
