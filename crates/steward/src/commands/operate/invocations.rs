//! `steward invocations list|show`.

use super::super::remote::{Remote, RemoteArgs};
use super::super::table::{age, cell, fields, listing, now, text};
use steward_client::InvocationFilter;
use steward_wire::Invocation;

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
            let filter = InvocationFilter { action, status };
            let answer = remote.api.invocations(&filter).await?;
            remote.print(&answer, |invocations| list(invocations));
        }
        Command::Show { id, remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.invocation(&id).await?;
            remote.print(&answer, show);
        }
    }
    Ok(())
}

fn list(invocations: &[Invocation]) -> String {
    let now = now();
    listing(
        invocations,
        &[
            ("ID", &|i: &Invocation| i.id.to_string()),
            ("ACTION", &|i: &Invocation| i.action.clone()),
            ("STATUS", &|i: &Invocation| i.status.clone()),
            ("GRADE", &|i: &Invocation| cell(&i.grade)),
            ("APPROVAL", &|i: &Invocation| cell(&i.approval_id)),
            ("AGE", &|i: &Invocation| age(Some(&i.created_at), now)),
            ("OPERATION KEY", &|i: &Invocation| cell(&i.operation_key)),
        ],
    )
}

fn show(i: &Invocation) -> String {
    fields(&[
        ("id", i.id.to_string()),
        ("action", format!("{} v{}", i.action, i.action_version)),
        ("status", i.status.clone()),
        ("grade", cell(&i.grade)),
        ("effect", cell(&i.effect_id)),
        ("approval", cell(&i.approval_id)),
        ("operation key", cell(&i.operation_key)),
        ("input", text(&i.input)),
        ("decision", cell(&i.decision)),
        ("response status", cell(&i.response_status)),
        ("response", cell(&i.body)),
        ("error", cell(&i.error)),
        ("created", i.created_at.clone()),
        ("completed", cell(&i.completed_at)),
    ])
}
