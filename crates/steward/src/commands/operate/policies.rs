//! `steward policies plan|apply|test FILE`: the environment's approval policies as a file in a
//! repository. `plan` shows what the file would change and the digest of that change; `apply
//! --digest D` makes exactly that change, or fails with `STALE_PLAN` if anything moved since;
//! `test --cases CASES` decides described requests against the set the file would leave, and
//! changes nothing. Exit status 0 done, 1 refused (or a test case that missed its expectation).

use super::super::remote::{fresh_key, Remote, RemoteArgs};
use super::super::table::{fields, text};
use anyhow::{bail, Context};
use serde_json::Value;
use std::path::{Path, PathBuf};
use steward_client::{OperatorError, PolicyFile};

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// What applying FILE would change, and the digest that applies exactly that (read-only).
    Plan {
        /// The policy file (YAML or JSON).
        file: PathBuf,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Apply the plan of FILE whose digest `plan` printed; refused if anything changed since.
    Apply {
        file: PathBuf,
        /// The digest `steward policies plan FILE` printed for the change you reviewed.
        #[arg(long)]
        digest: String,
        /// Kept with every policy version the apply writes.
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Decide the requests in CASES against the policies FILE would leave; writes nothing.
    Test {
        file: PathBuf,
        /// The cases (YAML or JSON): a list of {name, kind, actionName, agentId, userId, tags,
        /// payload, expect}.
        #[arg(long)]
        cases: PathBuf,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    // A test whose case missed its expectation is printed whole, then fails the command.
    let mut failed = false;
    let outcome = match command {
        Command::Plan { file, remote } => {
            let remote = Remote::connect(&remote)?;
            let plan = PolicyFile::Plan {
                source: read(&file)?,
            };
            let data = remote.api.policy_file(&plan, &fresh_key()).await;
            data.map(|data| remote.print_json(&data, show_plan))
        }
        Command::Apply {
            file,
            digest,
            note,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            let apply = PolicyFile::Apply {
                source: read(&file)?,
                digest,
                note,
            };
            let data = remote.api.policy_file(&apply, &fresh_key()).await;
            data.map(|data| remote.print_json(&data, show_applied))
        }
        Command::Test {
            file,
            cases,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            let test = PolicyFile::Test {
                source: read(&file)?,
                cases: read(&cases)?,
            };
            let data = remote.api.policy_file(&test, &fresh_key()).await;
            data.map(|data| {
                remote.print_json(&data, show_test);
                failed = data["passed"] != Value::Bool(true);
            })
        }
    };
    outcome.map_err(explain)?;
    if failed {
        bail!("a case did not decide as expected");
    }
    Ok(())
}

/// A refusal that lists the file's problems gets them all, one a line.
fn explain(err: OperatorError) -> anyhow::Error {
    let OperatorError::Refused {
        code,
        message,
        details,
        ..
    } = &err
    else {
        return err.into();
    };
    match details["errors"].as_array() {
        Some(errors) if !errors.is_empty() => {
            let lines: Vec<String> = errors
                .iter()
                .map(|e| format!("  {}: {}", text(&e["field"]), text(&e["message"])))
                .collect();
            anyhow::anyhow!("{message} ({code}):\n{}", lines.join("\n"))
        }
        _ => err.into(),
    }
}

fn show_plan(plan: &Value) -> String {
    let mut out = String::new();
    for change in plan["changes"].as_array().into_iter().flatten() {
        let version = match change.get("fromVersion") {
            Some(v) if !v.is_null() => format!(" (from version {v})"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "{:<7} {}{version}\n",
            text(&change["op"]),
            text(&change["name"])
        ));
    }
    for name in plan["unchanged"].as_array().into_iter().flatten() {
        out.push_str(&format!("{:<7} {}\n", "keep", text(name)));
    }
    let summary = &plan["summary"];
    out.push_str(&fields(&[
        (
            "summary",
            format!(
                "{} to create, {} to update, {} to delete, {} unchanged",
                summary["create"], summary["update"], summary["delete"], summary["unchanged"]
            ),
        ),
        ("digest", text(&plan["digest"])),
    ]));
    out
}

fn show_applied(applied: &Value) -> String {
    let mut out = show_plan(applied);
    let done = if applied["applied"] == Value::Bool(true) {
        "applied"
    } else {
        "nothing to apply: the policies already match the file"
    };
    out.push_str(&fields(&[("result", done.to_string())]));
    out
}

fn show_test(report: &Value) -> String {
    let mut out = String::new();
    for result in report["results"].as_array().into_iter().flatten() {
        let verdict = match result["passed"].as_bool() {
            Some(true) => "pass",
            Some(false) => "FAIL",
            None => "-",
        };
        let name = match result["name"].as_str() {
            Some(name) => name.to_string(),
            None => format!("case {}", result["index"]),
        };
        let effect = result["effect"].as_str().unwrap_or("no policy applies");
        let policy = match result["policy"].as_str() {
            Some(policy) => format!(" by {policy}"),
            None => String::new(),
        };
        out.push_str(&format!("{verdict:<5} {name}: {effect}{policy}\n"));
    }
    out
}
