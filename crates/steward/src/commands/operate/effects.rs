//! `steward effects list|show|reconcile|resolve`. There is no retry or re-send here: an
//! unknown outcome is settled by a read-only lookup or by a person's reasoned resolution.

use super::super::remote::{segment, Remote, RemoteArgs};
use super::super::table::{fields, listing, text, Cell, Table};
use serde_json::{json, Value};

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Governed effects, newest first.
    List {
        /// Only the ones that still need someone (`unknown` or still dispatching): the queue.
        #[arg(long)]
        unresolved: bool,
        /// Only this outcome: not_dispatched, pending, succeeded, failed or unknown.
        #[arg(long)]
        outcome: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// One effect: its attempts and its evidence, in order.
    Show {
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Ask the provider, read-only, what became of an unresolved effect.
    Reconcile {
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Settle an unresolved effect by hand, with a reason (needs a key other than the one
    /// that invoked it).
    Resolve {
        id: String,
        /// succeeded or failed.
        #[arg(long)]
        outcome: String,
        /// What you checked, kept as evidence.
        #[arg(long)]
        reason: String,
        /// The provider's id for the write, if you found it.
        #[arg(long)]
        external_reference: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::List {
            unresolved,
            outcome,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            let mut query = vec![("limit", "200".to_string())];
            if unresolved {
                query.push(("unresolved", "true".into()));
            }
            if let Some(outcome) = outcome {
                query.push(("outcome", outcome));
            }
            let data = remote.get("/actions/effects", &query).await?;
            remote.print(&data, list);
        }
        Command::Show { id, remote } => {
            let remote = Remote::connect(&remote)?;
            let data = remote.get(&path(&id, ""), &[]).await?;
            remote.print(&data, show);
        }
        Command::Reconcile { id, remote } => {
            let remote = Remote::connect(&remote)?;
            let data = remote.post(&path(&id, "/reconcile"), &json!({})).await?;
            remote.print(&data, show);
        }
        Command::Resolve {
            id,
            outcome,
            reason,
            external_reference,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            let body = json!({"outcome": outcome, "reason": reason,
                              "externalReference": external_reference});
            let data = remote.post(&path(&id, "/resolve"), &body).await?;
            remote.print(&data, show);
        }
    }
    Ok(())
}

fn path(id: &str, rest: &str) -> String {
    format!("/actions/effects/{}{rest}", segment(id))
}

fn list(data: &Value) -> String {
    listing(
        data,
        &[
            ("ID", Cell::Field("id")),
            ("ACTION", Cell::Field("action")),
            ("OUTCOME", Cell::Field("outcome")),
            ("STAGE", Cell::Field("stage")),
            ("GRADE", Cell::Field("grade")),
            ("ATTEMPTS", Cell::Field("attemptCount")),
            ("AGE", Cell::Age("createdAt")),
            ("OPERATION KEY", Cell::Field("operationKey")),
        ],
    )
}

fn show(e: &Value) -> String {
    let mut out = fields(&[
        ("id", text(&e["id"])),
        ("action", text(&e["action"])),
        ("invocation", text(&e["invocationId"])),
        ("operation key", text(&e["operationKey"])),
        ("outcome", text(&e["outcome"])),
        ("stage", text(&e["stage"])),
        ("grade", text(&e["grade"])),
        ("unresolved", text(&e["unresolved"])),
        ("provider reference", text(&e["externalReference"])),
        ("created", text(&e["createdAt"])),
        ("updated", text(&e["updatedAt"])),
    ]);
    let mut attempts = Table::new(&["ATTEMPT", "STATUS", "STARTED", "FINISHED", "HTTP", "ERROR"]);
    for a in e["attempts"].as_array().into_iter().flatten() {
        attempts.row(vec![
            text(&a["number"]),
            text(&a["status"]),
            text(&a["startedAt"]),
            text(&a["finishedAt"]),
            text(&a["responseStatus"]),
            text(&a["error"]),
        ]);
    }
    let mut evidence = Table::new(&["SEQ", "AT", "KIND", "SOURCE", "BY", "MESSAGE"]);
    for v in e["evidence"].as_array().into_iter().flatten() {
        evidence.row(vec![
            text(&v["seq"]),
            text(&v["at"]),
            text(&v["kind"]),
            text(&v["source"]),
            text(&v["actorKeyId"]),
            text(&v["message"]),
        ]);
    }
    out.push('\n');
    out.push_str(&attempts.render());
    out.push('\n');
    out.push_str(&evidence.render());
    out
}
