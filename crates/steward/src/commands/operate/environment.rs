//! `steward environment halt|resume|show|set`: the kill switch of the key's environment, and
//! its setting for governed invokes without any key.

use super::super::remote::{fresh_key, Remote, RemoteArgs};
use super::super::table::fields;
use steward_wire::{Environment, UnkeyedInvokes};

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
    /// The environment, whether it is halted, and its settings.
    Show {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Change a setting of the environment (needs `environments:halt`).
    Set {
        /// What a governed invoke with neither an operationKey nor an Idempotency-Key gets:
        /// `refuse` (400 operation_key_required) or `accept` (answered with a warning).
        #[arg(long, value_parser = ["accept", "refuse"])]
        unkeyed_invokes: String,
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
        Command::Set {
            unkeyed_invokes,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            let setting = match unkeyed_invokes.as_str() {
                "refuse" => UnkeyedInvokes::Refuse,
                _ => UnkeyedInvokes::Accept,
            };
            let answer = remote
                .api
                .set_unkeyed_invokes(setting, &fresh_key())
                .await?;
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
        ("unkeyed invokes", unkeyed(e.unkeyed_invokes).to_string()),
    ];
    if let Some(reason) = &e.halt_reason {
        pairs.push(("reason", reason.clone()));
    }
    fields(&pairs)
}

fn unkeyed(setting: UnkeyedInvokes) -> &'static str {
    match setting {
        UnkeyedInvokes::Accept => "accept",
        UnkeyedInvokes::Refuse => "refuse",
    }
}
