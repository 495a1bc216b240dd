//! `steward approvals list|show|approve|deny`.

use super::super::remote::{fresh_key, named_key, Remote, RemoteArgs};
use super::super::table::{age, cell, fields, listing, now, text, Table};
use steward_client::Answer;
use steward_core::Decision;
use steward_wire::{Approval, Decided, Invocation};

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
    /// Approve (the parked call dispatches once the last approver needed has approved). Several
    /// ids are decided one by one, each on its own (separation of duties is checked for each),
    /// with the one note, and each id's outcome is reported; the command fails if any was not
    /// counted.
    Approve {
        #[arg(required = true, num_args = 1.., value_name = "ID")]
        ids: Vec<String>,
        /// Why, kept with each decision.
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Deny: the parked call never runs; the requester sees the note. Several ids are denied
    /// one by one, as `approve` decides them.
    Deny {
        #[arg(required = true, num_args = 1.., value_name = "ID")]
        ids: Vec<String>,
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
            let status = Some(status).filter(|s| s != "all");
            let answer = remote.api.approvals(status.as_deref()).await?;
            remote.print(&answer, |approvals| list(approvals));
        }
        Command::Show { id, remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.approval(&id).await?;
            remote.print(&answer, show);
        }
        Command::Approve { ids, note, remote } => {
            decide_all(&remote, &ids, Decision::Approve, note).await?
        }
        Command::Deny { ids, note, remote } => {
            decide_all(&remote, &ids, Decision::Deny, note).await?
        }
    }
    Ok(())
}

/// Decides `ids` with one note: one id as [`decide`] does; several one after the other, each
/// its own decision, with a line per id (or, with `--json`, one JSON object per id) saying what
/// became of it. Fails when any decision was refused or changed nothing.
async fn decide_all(
    remote: &RemoteArgs,
    ids: &[String],
    decision: Decision,
    note: Option<String>,
) -> anyhow::Result<()> {
    if let [id] = ids {
        return decide(remote, id, decision, note).await;
    }
    let connected = Remote::connect(remote)?;
    let mut refused = 0;
    for id in ids {
        let answer = connected
            .api
            .decide(id, decision, note.as_deref(), &fresh_key())
            .await;
        let outcome = Outcome::of(id, decision, answer.map(|a| a.view).map_err(Into::into));
        refused += usize::from(!outcome.counted);
        if connected.json {
            println!("{}", outcome.json);
        } else {
            println!("{}", outcome.line);
        }
    }
    if refused > 0 {
        anyhow::bail!("{refused} of {} decisions were not counted", ids.len());
    }
    Ok(())
}

/// What one decision of a batch came to.
struct Outcome {
    counted: bool,
    /// `apr_1: approved; dispatched: inv_1 is succeeded` or `apr_2: not counted: ...`.
    line: String,
    /// `{"id", "counted", "status", "invocation", "code", "message"}`.
    json: serde_json::Value,
}

impl Outcome {
    fn of(id: &str, decision: Decision, answer: anyhow::Result<Decided>) -> Outcome {
        let verb = match decision {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        };
        match answer {
            Ok(Decided {
                approval,
                unchanged: Some(unchanged),
                ..
            }) => Outcome {
                counted: false,
                line: format!(
                    "{id}: not counted (your {verb} changed nothing; it is {}): {} ({})",
                    approval.status, unchanged.message, unchanged.code
                ),
                json: serde_json::json!({
                    "id": id, "counted": false, "status": approval.status,
                    "code": unchanged.code, "message": unchanged.message,
                }),
            },
            Ok(Decided {
                approval,
                invocation,
                unchanged: None,
            }) => {
                let mut line = format!("{id}: {}", approval.status);
                if let Some(inv) = &invocation {
                    line.push_str(&format!("; {}", dispatched(inv)));
                }
                Outcome {
                    counted: true,
                    line,
                    json: serde_json::json!({
                        "id": id, "counted": true, "status": approval.status,
                        "invocation": invocation.as_ref().map(|i| serde_json::json!({
                            "id": i.id, "status": i.status,
                        })),
                    }),
                }
            }
            Err(e) => Outcome {
                counted: false,
                line: format!("{id}: refused: {e:#}"),
                json: serde_json::json!({"id": id, "counted": false, "error": format!("{e:#}")}),
            },
        }
    }
}

async fn decide(
    remote: &RemoteArgs,
    id: &str,
    decision: Decision,
    note: Option<String>,
) -> anyhow::Result<()> {
    let remote = Remote::connect(remote)?;
    let answer = remote
        .api
        .decide(id, decision, note.as_deref(), &fresh_key())
        .await?;
    // The answer is the approval and the invocation as the decision's dispatch left it (`null`
    // for a custom request).
    let Decided {
        approval,
        invocation,
        unchanged,
    } = answer.view;
    // A decision that changed nothing (the approval expired or was settled, or this key had
    // decided it already) is answered with the approval as it is and the server's reason, the
    // same the console shows; a person at a terminal must not mistake it for their decision.
    if let Some(unchanged) = unchanged {
        let verb = match decision {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        };
        let state = match approval.status.as_str() {
            "pending" => "still pending".to_string(),
            other => format!("already {other}"),
        };
        anyhow::bail!(
            "approval {id} is {state}; your {verb} changed nothing: {} ({})",
            unchanged.message,
            unchanged.code
        );
    }
    // `--json` prints the approval (the API's `data.approval`) as before.
    let approval = Answer {
        data: answer.data.get("approval").cloned().unwrap_or_default(),
        view: approval,
    };
    remote.print(&approval, show);
    // A person also reads what the dispatch did.
    if let (Some(invocation), false) = (invocation, remote.json) {
        println!("\n{}", dispatched(&invocation));
    }
    Ok(())
}

/// What the released invocation's dispatch did, in one line: a person who approved a refund
/// wants to know whether it happened without a second command.
fn dispatched(inv: &Invocation) -> String {
    let status = inv.status.as_str();
    let mut line = format!("dispatched: {} is {status}", inv.id);
    if let Some(grade) = &inv.grade {
        line.push_str(&format!(" (grade {grade})"));
    }
    match status {
        "unknown" => line.push_str(&format!(
            "; the provider may have acted and the reconciler is settling it: steward effects show {}",
            cell(&inv.effect_id)
        )),
        "pending_approval" => line.push_str("; it needs more approvals"),
        _ => {}
    }
    line
}

/// Who asked: `key_... (name)`.
fn requester(a: &Approval) -> String {
    named_key(&a.requested_by, a.requested_by_name.as_deref())
}

/// `approved 1/2` style progress.
fn progress(a: &Approval) -> String {
    let approvals = a
        .decisions
        .iter()
        .filter(|d| d.decision == Decision::Approve)
        .count();
    format!("{approvals}/{}", a.required_approvals)
}

fn list(approvals: &[Approval]) -> String {
    let now = now();
    listing(
        approvals,
        &[
            ("ID", &|a: &Approval| a.id.to_string()),
            ("STATUS", &|a: &Approval| a.status.clone()),
            ("TITLE", &|a: &Approval| a.title.clone()),
            ("REQUESTED BY", &requester),
            ("APPROVED", &progress),
            ("AGE", &|a: &Approval| age(Some(&a.created_at), now)),
            ("EXPIRES", &|a: &Approval| age(a.expires_at.as_deref(), now)),
        ],
    )
}

fn show(a: &Approval) -> String {
    let mut out = fields(&[
        ("id", a.id.to_string()),
        ("status", a.status.clone()),
        ("title", a.title.clone()),
        ("invocation", cell(&a.invocation_id)),
        ("effect", cell(&a.effect_id)),
        ("requested by", requester(a)),
        ("approved", progress(a)),
        ("created", a.created_at.clone()),
        ("expires", cell(&a.expires_at)),
        ("decided", cell(&a.decided_at)),
        ("input", text(&a.payload)),
    ]);
    let mut decisions = Table::new(&["DECISION", "BY", "AT", "NOTE"]);
    for d in &a.decisions {
        decisions.row(vec![
            cell(&d.decision),
            named_key(&d.key_id, d.key_name.as_deref()),
            d.at.clone(),
            cell(&d.note),
        ]);
    }
    out.push('\n');
    out.push_str(&decisions.render());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn approval() -> Approval {
        serde_json::from_value(json!({
            "id": "apr_1", "status": "approved", "title": "Approve refund",
            "description": null, "payload": {"amount": 5}, "invocationId": "inv_1",
            "effectId": null, "actionId": null, "actionVersion": null,
            "inputFingerprint": null, "requestedBy": "key_agent", "requestedByName": null,
            "requiredApprovals": 2,
            "decisions": [{"keyId": "key_ops", "keyName": "night-ops", "decision": "approve",
                           "note": null,
                           "at": "2026-12-06T09:00:00Z"}],
            "decisionOrigin": null, "decisionNote": null, "decidedAt": null,
            "expiresAt": null, "runId": null, "createdAt": "2026-12-06T08:59:00Z"
        }))
        .expect("an approval view")
    }

    /// The table reads as it did from the JSON (`-` for nothing, JSON for the payload), with a
    /// key the view names shown with its name beside its id, and one it does not by its id.
    #[test]
    fn an_approval_shows_its_fields_and_decisions_with_the_known_key_named() {
        let shown = show(&approval());
        assert_eq!(
            shown,
            "id:           apr_1\n\
             status:       approved\n\
             title:        Approve refund\n\
             invocation:   inv_1\n\
             effect:       -\n\
             requested by: key_agent\n\
             approved:     1/2\n\
             created:      2026-12-06T08:59:00Z\n\
             expires:      -\n\
             decided:      -\n\
             input:        {\"amount\":5}\n\
             \n\
             DECISION  BY                   AT                    NOTE\n\
             approve   key_ops (night-ops)  2026-12-06T09:00:00Z  -\n"
        );
    }
}
