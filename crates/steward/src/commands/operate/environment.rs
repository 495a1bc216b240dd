//! `steward environment halt|resume|show|set`: the kill switch of the key's environment, and
//! its setting for governed invokes without any key.

use super::super::remote::{Remote, RemoteArgs};
use super::super::table::{fields, text};
use serde_json::{json, Value};

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
    let (remote, data) = match command {
        Command::Halt { reason, remote } => {
            let remote = Remote::connect(&remote)?;
            let data = remote
                .post("/environment/halt", &json!({"reason": reason}))
                .await?;
            (remote, data)
        }
        Command::Resume { remote } => {
            let remote = Remote::connect(&remote)?;
            let data = remote.post("/environment/resume", &json!({})).await?;
            (remote, data)
        }
        Command::Show { remote } => {
            let remote = Remote::connect(&remote)?;
            let data = remote.get("/environment", &[]).await?;
            (remote, data)
        }
        Command::Set {
            unkeyed_invokes,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            let body = json!({ "unkeyedInvokes": unkeyed_invokes });
            let data = remote.patch("/environment", &body).await?;
            (remote, data)
        }
    };
    remote.print(&data, show);
    Ok(())
}

fn show(e: &Value) -> String {
    let mut pairs = vec![
        (
            "environment",
            text(e.get("name").or(e.get("id")).unwrap_or(&Value::Null)),
        ),
        ("halted", text(&e["halted"])),
    ];
    if !e["unkeyedInvokes"].is_null() {
        pairs.push(("unkeyed invokes", text(&e["unkeyedInvokes"])));
    }
    for (field, label) in [("haltReason", "reason"), ("haltedAt", "halted at")] {
        if !e[field].is_null() {
            pairs.push((label, text(&e[field])));
        }
    }
    fields(&pairs)
}
