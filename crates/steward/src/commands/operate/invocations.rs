//! `steward invocations list|show`.

use super::super::remote::{segment, Remote, RemoteArgs};
use super::super::table::{fields, listing, text, Cell};
use serde_json::Value;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Invocations, newest first.
    List {
        /// Only this action's (name or id).
        #[arg(long)]
        action: Option<String>,
        /// Only this status: pending_approval, running, succeeded, failed, unknown, denied,
        /// expired.
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// One invocation: input, status, approval, policy decision and the provider's answer.
    Show {
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::List {
            action,
            status,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            let mut query = vec![("limit", "200".to_string())];
            if let Some(action) = action {
                query.push(("action", action));
            }
            if let Some(status) = status {
                query.push(("status", status));
            }
            let data = remote.get("/actions/invocations", &query).await?;
            remote.print(&data, list);
        }
        Command::Show { id, remote } => {
            let remote = Remote::connect(&remote)?;
            let path = format!("/actions/invocations/{}", segment(&id));
            let data = remote.get(&path, &[]).await?;
            remote.print(&data, show);
        }
    }
    Ok(())
}

fn list(data: &Value) -> String {
    listing(
        data,
        &[
            ("ID", Cell::Field("id")),
            ("ACTION", Cell::Field("action")),
            ("STATUS", Cell::Field("status")),
            ("GRADE", Cell::Field("grade")),
            ("APPROVAL", Cell::Field("approvalId")),
            ("AGE", Cell::Age("createdAt")),
            ("OPERATION KEY", Cell::Field("operationKey")),
        ],
    )
}

fn show(i: &Value) -> String {
    fields(&[
        ("id", text(&i["id"])),
        (
            "action",
            format!("{} v{}", text(&i["action"]), text(&i["actionVersion"])),
        ),
        ("status", text(&i["status"])),
        ("grade", text(&i["grade"])),
        ("effect", text(&i["effectId"])),
        ("approval", text(&i["approvalId"])),
        ("operation key", text(&i["operationKey"])),
        ("input", text(&i["input"])),
        ("decision", text(&i["decision"])),
        ("response status", text(&i["responseStatus"])),
        ("response", text(&i["body"])),
        ("error", text(&i["error"])),
        ("created", text(&i["createdAt"])),
        ("completed", text(&i["completedAt"])),
    ])
}
