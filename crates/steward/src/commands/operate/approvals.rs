//! `steward approvals list|show|approve|deny`.

use super::super::remote::{segment, Remote, RemoteArgs};
use super::super::table::{fields, listing, text, Cell, Table};
use serde_json::{json, Value};

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Approvals, newest first (pending ones by default).
    List {
        /// pending, approved, denied, expired, or all.
        #[arg(long, default_value = "pending")]
        status: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// One approval with its decisions.
    Show {
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Approve (the parked call dispatches once the last approver needed has approved).
    Approve {
        id: String,
        /// Why, kept with the decision.
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Deny: the parked call never runs; the requester sees the note.
    Deny {
        id: String,
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::List { status, remote } => {
            let remote = Remote::connect(&remote)?;
            let mut query = vec![("limit", "200".to_string())];
            if status != "all" {
                query.push(("status", status));
            }
            let data = remote.get("/approvals", &query).await?;
            remote.print(&data, list);
        }
        Command::Show { id, remote } => {
            let remote = Remote::connect(&remote)?;
            let data = remote
                .get(&format!("/approvals/{}", segment(&id)), &[])
                .await?;
            remote.print(&data, show);
        }
        Command::Approve { id, note, remote } => decide(&remote, &id, "approve", note).await?,
        Command::Deny { id, note, remote } => decide(&remote, &id, "deny", note).await?,
    }
    Ok(())
}

async fn decide(
    remote: &RemoteArgs,
    id: &str,
    decision: &str,
    note: Option<String>,
) -> anyhow::Result<()> {
    let remote = Remote::connect(remote)?;
    let path = format!("/approvals/{}/{decision}", segment(id));
    let data = remote.post(&path, &json!({"note": note})).await?;
    // The answer is the approval, or `{approval, invocation}`: the invocation as the decision's
    // dispatch left it, when the decision released it.
    let invocation = data.get("invocation").filter(|i| i.is_object()).cloned();
    let approval = data.get("approval").cloned().unwrap_or(data);
    // The API answers a decision on a settled approval with the approval unchanged; a person
    // at a terminal must not mistake that for their decision.
    let status = approval["status"].as_str().unwrap_or_default();
    let took = match decision {
        "deny" => status == "denied",
        _ => matches!(status, "approved" | "pending"),
    };
    if !took {
        anyhow::bail!("approval {id} is already {status}; your {decision} changed nothing");
    }
    remote.print(&approval, show);
    // `--json` prints the approval as before; a person also reads what the dispatch did.
    if let (Some(invocation), false) = (invocation, remote.json) {
        println!("\n{}", dispatched(&invocation));
    }
    Ok(())
}

/// What the released invocation's dispatch did, in one line: a person who approved a refund
/// wants to know whether it happened without a second command.
fn dispatched(inv: &Value) -> String {
    let status = inv["status"].as_str().unwrap_or("unknown");
    let mut line = format!("dispatched: {} is {status}", text(&inv["id"]));
    if let Some(grade) = inv["grade"].as_str() {
        line.push_str(&format!(" (grade {grade})"));
    }
    match status {
        "unknown" => line.push_str(&format!(
            "; the provider may have acted and the reconciler is settling it: steward effects show {}",
            text(&inv["effectId"])
        )),
        "pending_approval" => line.push_str("; it needs more approvals"),
        _ => {}
    }
    line
}

/// `approved 1/2` style progress.
fn progress(a: &Value) -> String {
    let approvals = a["decisions"]
        .as_array()
        .map(|d| d.iter().filter(|d| d["decision"] == "approve").count())
        .unwrap_or(0);
    let required = a["requiredApprovals"].as_u64().unwrap_or(1);
    format!("{approvals}/{required}")
}

fn list(data: &Value) -> String {
    listing(
        data,
        &[
            ("ID", Cell::Field("id")),
            ("STATUS", Cell::Field("status")),
            ("TITLE", Cell::Field("title")),
            ("REQUESTED BY", Cell::Field("requestedBy")),
            ("APPROVED", Cell::With(progress)),
            ("AGE", Cell::Age("createdAt")),
            ("EXPIRES", Cell::Age("expiresAt")),
        ],
    )
}

fn show(a: &Value) -> String {
    let mut out = fields(&[
        ("id", text(&a["id"])),
        ("status", text(&a["status"])),
        ("title", text(&a["title"])),
        ("invocation", text(&a["invocationId"])),
        ("effect", text(&a["effectId"])),
        ("requested by", text(&a["requestedBy"])),
        ("approved", progress(a)),
        ("created", text(&a["createdAt"])),
        ("expires", text(&a["expiresAt"])),
        ("decided", text(&a["decidedAt"])),
        ("input", text(&a["payload"])),
    ]);
    let mut decisions = Table::new(&["DECISION", "BY", "AT", "NOTE"]);
    for d in a["decisions"].as_array().into_iter().flatten() {
        decisions.row(vec![
            text(&d["decision"]),
            text(&d["keyId"]),
            text(&d["at"]),
            text(&d["note"]),
        ]);
    }
    out.push('\n');
    out.push_str(&decisions.render());
    out
}
