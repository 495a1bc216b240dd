//! `steward actions list|show`.

use super::super::remote::{segment, Remote, RemoteArgs};
use super::super::table::{fields, listing, text, Cell, Table};
use serde_json::Value;

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
            let data = remote.get("/actions", &[]).await?;
            remote.print(&data, list);
        }
        Command::Show { reference, remote } => {
            let remote = Remote::connect(&remote)?;
            let path = format!("/actions/{}", segment(&reference));
            let action = remote.get(&path, &[]).await?;
            let versions = remote.get(&format!("{path}/versions"), &[]).await?;
            let data = serde_json::json!({"action": action, "versions": versions});
            remote.print(&data, show);
        }
    }
    Ok(())
}

fn kind(a: &Value) -> String {
    match &a["adapter"] {
        Value::Null => format!("{} {}", text(&a["method"]), text(&a["urlTemplate"])),
        adapter => text(&adapter["type"]),
    }
}

fn list(data: &Value) -> String {
    listing(
        data,
        &[
            ("NAME", Cell::Field("name")),
            ("VERSION", Cell::Field("version")),
            ("ENABLED", Cell::Field("enabled")),
            ("APPROVAL", Cell::With(approval)),
            ("GOVERNED", Cell::Field("governed")),
            ("CALLS", Cell::With(kind)),
        ],
    )
}

fn approval(a: &Value) -> String {
    if a["requiresApproval"] == true {
        "required"
    } else {
        "-"
    }
    .into()
}

fn show(data: &Value) -> String {
    let a = &data["action"];
    let mut out = fields(&[
        ("id", text(&a["id"])),
        ("name", text(&a["name"])),
        ("description", text(&a["description"])),
        ("version", text(&a["version"])),
        ("enabled", text(&a["enabled"])),
        ("requires approval", text(&a["requiresApproval"])),
        ("governed", text(&a["governed"])),
        ("calls", kind(a)),
        ("input schema", text(&a["inputSchema"])),
        ("impact", text(&a["impact"])),
    ]);
    let mut versions = Table::new(&["VERSION", "CREATED", "ENABLED", "APPROVAL"]);
    for v in data["versions"].as_array().into_iter().flatten() {
        versions.row(vec![
            text(&v["version"]),
            text(&v["createdAt"]),
            text(&v["enabled"]),
            text(&v["requiresApproval"]),
        ]);
    }
    out.push('\n');
    out.push_str(&versions.render());
    out
}
