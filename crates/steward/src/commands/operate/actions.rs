//! `steward actions list|show`.

use super::super::remote::{named_key_opt, Remote, RemoteArgs};
use super::super::table::{cell, fields, listing, Table};
use serde_json::json;
use steward_client::Answer;
use steward_wire::Action;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// The environment's actions.
    List {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// One action (name or id) and its version history.
    Show {
        reference: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::List { remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.actions().await?;
            remote.print(&answer, |actions| list(actions));
        }
        Command::Show { reference, remote } => {
            let remote = Remote::connect(&remote)?;
            let action = remote.api.action(&reference).await?;
            let versions = remote.api.action_versions(&reference).await?;
            let answer = Answer {
                data: json!({"action": action.data, "versions": versions.data}),
                view: (action.view, versions.view),
            };
            remote.print(&answer, |(action, versions)| show(action, versions));
        }
    }
    Ok(())
}

/// What the action calls: its adapter's type, or its method and URL template.
fn kind(a: &Action) -> String {
    match &a.adapter {
        Some(Some(adapter)) => adapter.kind.clone(),
        _ => format!("{} {}", cell(&a.method), cell(&a.url_template)),
    }
}

fn approval(a: &Action) -> String {
    if a.requires_approval { "required" } else { "-" }.into()
}

fn list(actions: &[Action]) -> String {
    listing(
        actions,
        &[
            ("NAME", &|a: &Action| a.name.clone()),
            ("VERSION", &|a: &Action| cell(&a.version)),
            ("ENABLED", &|a: &Action| a.enabled.to_string()),
            ("APPROVAL", &approval),
            ("GOVERNED", &|a: &Action| a.governed.to_string()),
            ("CALLS", &kind),
        ],
    )
}

fn show(a: &Action, versions: &[Action]) -> String {
    let mut out = fields(&[
        ("id", cell(&a.id)),
        ("name", a.name.clone()),
        ("description", cell(&a.description)),
        ("version", cell(&a.version)),
        ("enabled", a.enabled.to_string()),
        ("requires approval", a.requires_approval.to_string()),
        ("governed", a.governed.to_string()),
        ("calls", kind(a)),
        ("input schema", cell(&a.input_schema)),
        ("impact", cell(&a.impact)),
    ]);
    let mut table = Table::new(&["VERSION", "CREATED", "BY", "ENABLED", "APPROVAL"]);
    for v in versions {
        table.row(vec![
            cell(&v.version),
            cell(&v.created_at),
            named_key_opt(
                v.created_by.clone().flatten().as_ref(),
                v.created_by_name.clone().flatten().as_deref(),
            ),
            v.enabled.to_string(),
            v.requires_approval.to_string(),
        ]);
    }
    out.push('\n');
    out.push_str(&table.render());
    out
}
