//! `steward holds add|list|release`: besides the kill switch (`steward environment halt`), hold
//! one action or one operation key of the key's environment. New invokes under a hold park
//! (nothing is sent); `release` runs each parked invocation once. Needs `environments:halt`.

use super::super::remote::{fresh_key, Remote, RemoteArgs};
use super::super::table::listing;
use serde_json::json;
use steward_wire::Hold;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// The environment's holds, oldest first.
    List {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Hold an action (--action), an operation key (--operation-key), or that key under that
    /// action (both).
    Add {
        /// The name of the action to hold.
        #[arg(long)]
        action: Option<String>,
        /// The operation key to hold.
        #[arg(long)]
        operation_key: Option<String>,
        /// Why, shown to whoever releases it.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Release a hold by id (`hold_...`): what it parked runs once each.
    Release {
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::List { remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.holds().await?;
            remote.print(&answer, |holds| list(holds));
        }
        Command::Add {
            action,
            operation_key,
            reason,
            remote,
        } => {
            if action.is_none() && operation_key.is_none() {
                anyhow::bail!("name what to hold: --action, --operation-key, or both");
            }
            let remote = Remote::connect(&remote)?;
            let body =
                json!({"actionName": action, "operationKey": operation_key, "reason": reason});
            let answer = remote.api.hold(&body, &fresh_key()).await?;
            remote.print(&answer, |h| list(std::slice::from_ref(h)));
        }
        Command::Release { id, remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.release_hold(&id, &fresh_key()).await?;
            remote.print(&answer, |h| {
                format!(
                    "released {} ({} parked invocation(s) dispatched)\n",
                    h.id,
                    h.released.unwrap_or(0)
                )
            });
        }
    }
    Ok(())
}

fn list(holds: &[Hold]) -> String {
    listing(
        holds,
        &[
            ("ID", &|h: &Hold| h.id.clone()),
            ("ACTION", &|h: &Hold| {
                h.action_name.clone().unwrap_or_else(|| "*".into())
            }),
            ("OPERATION KEY", &|h: &Hold| {
                h.operation_key.clone().unwrap_or_else(|| "*".into())
            }),
            ("REASON", &|h: &Hold| h.reason.clone().unwrap_or_default()),
            ("CREATED", &|h: &Hold| h.created_at.clone()),
        ],
    )
}
