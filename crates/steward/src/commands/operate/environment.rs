//! `steward environment halt|resume`: the kill switch of the key's environment.

use super::super::remote::{fresh_key, Remote, RemoteArgs};
use super::super::table::fields;
use steward_wire::Environment;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Stop every call of the environment before it reaches a provider (parked until resume).
    Halt {
        /// Why, shown to whoever resumes and kept in the audit log.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Lift the halt; parked calls dispatch once each.
    Resume {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// The environment and whether it is halted.
    Show {
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    let (remote, answer) = match command {
        Command::Halt { reason, remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.halt(&reason, &fresh_key()).await?;
            (remote, answer)
        }
        Command::Resume { remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.resume(&fresh_key()).await?;
            (remote, answer)
        }
        Command::Show { remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.environment().await?;
            (remote, answer)
        }
    };
    remote.print(&answer, show);
    Ok(())
}

fn show(e: &Environment) -> String {
    let mut pairs = vec![
        ("environment", e.name.clone()),
        ("halted", e.halted.to_string()),
    ];
    if let Some(reason) = &e.halt_reason {
        pairs.push(("reason", reason.clone()));
    }
    fields(&pairs)
}
