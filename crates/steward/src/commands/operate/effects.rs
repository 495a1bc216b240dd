//! `steward effects list|show|reconcile|resolve`. There is no retry or re-send here: an
//! unknown outcome is settled by a read-only lookup or by a person's reasoned resolution.

use super::super::remote::{fresh_key, named_key_opt, Remote, RemoteArgs};
use super::super::table::{age, cell, fields, listing, now, Table};
use steward_client::{EffectFilter, Resolution};
use steward_wire::Effect;

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
            let filter = EffectFilter {
                unresolved,
                outcome,
            };
            let answer = remote.api.effects(&filter).await?;
            remote.print(&answer, |effects| list(effects));
        }
        Command::Show { id, remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.effect(&id).await?;
            remote.print(&answer, show);
        }
        Command::Reconcile { id, remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.reconcile(&id, &fresh_key()).await?;
            remote.print(&answer, show);
        }
        Command::Resolve {
            id,
            outcome,
            reason,
            external_reference,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            let resolution = Resolution {
                outcome,
                reason,
                external_reference,
            };
            let answer = remote.api.resolve(&id, &resolution, &fresh_key()).await?;
            remote.print(&answer, show);
        }
    }
    Ok(())
}

fn list(effects: &[Effect]) -> String {
    let now = now();
    listing(
        effects,
        &[
            ("ID", &|e: &Effect| e.id.to_string()),
            ("ACTION", &|e: &Effect| e.action.clone()),
            ("OUTCOME", &|e: &Effect| cell(&e.outcome)),
            ("STAGE", &|e: &Effect| cell(&e.stage)),
            ("GRADE", &|e: &Effect| e.grade.clone()),
            ("ATTEMPTS", &|e: &Effect| e.attempt_count.to_string()),
            ("AGE", &|e: &Effect| age(Some(&e.created_at), now)),
            ("OPERATION KEY", &|e: &Effect| cell(&e.operation_key)),
        ],
    )
}

fn show(e: &Effect) -> String {
    let mut out = fields(&[
        ("id", e.id.to_string()),
        ("action", e.action.clone()),
        ("invocation", e.invocation_id.to_string()),
        ("operation key", cell(&e.operation_key)),
        ("outcome", cell(&e.outcome)),
        ("stage", cell(&e.stage)),
        ("grade", e.grade.clone()),
        ("unresolved", e.unresolved.to_string()),
        ("provider reference", cell(&e.external_reference)),
        ("created", e.created_at.clone()),
        ("updated", e.updated_at.clone()),
    ]);
    let mut attempts = Table::new(&["ATTEMPT", "STATUS", "STARTED", "FINISHED", "HTTP", "ERROR"]);
    for a in e.attempts.iter().flatten() {
        attempts.row(vec![
            a.number.to_string(),
            a.status.clone(),
            a.started_at.clone(),
            cell(&a.finished_at),
            cell(&a.response_status),
            cell(&a.error),
        ]);
    }
    let mut evidence = Table::new(&["SEQ", "AT", "KIND", "SOURCE", "BY", "MESSAGE"]);
    for v in e.evidence.iter().flatten() {
        evidence.row(vec![
            v.seq.to_string(),
            v.at.clone(),
            cell(&v.kind),
            cell(&v.source),
            named_key_opt(v.actor_key_id.as_ref(), v.actor_key_name.as_deref()),
            v.message.clone(),
        ]);
    }
    out.push('\n');
    out.push_str(&attempts.render());
    out.push('\n');
    out.push_str(&evidence.render());
    out
}
