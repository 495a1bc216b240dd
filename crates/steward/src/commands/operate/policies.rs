//! `steward policies plan|apply|test FILE`: the environment's approval policies as a file in a
//! repository. `plan` shows what the file would change and the digest of that change; `apply
//! --digest D` makes exactly that change, or fails with `STALE_PLAN` if anything moved since;
//! `test --cases CASES` decides described requests against the set the file would leave, and
//! changes nothing. Exit status 0 done, 1 refused (or a test case that missed its expectation).

use super::super::remote::{fresh_key, Remote, RemoteArgs};
use super::super::table::{cell, fields, text};
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use steward_client::OperatorError;
use steward_wire::{
    PolicyFileApplied, PolicyFileChange, PolicyFilePlan, PolicyFileSummary, PolicyFileTest,
};

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
            let source = read(&file)?;
            let answer = remote.api.plan_policy_file(&source, &fresh_key()).await;
            answer.map(|answer| remote.print(&answer, show_plan))
        }
        Command::Apply {
            file,
            digest,
            note,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            let source = read(&file)?;
            let answer = remote
                .api
                .apply_policy_file(&source, &digest, note.as_deref(), &fresh_key())
                .await;
            answer.map(|answer| remote.print(&answer, show_applied))
        }
        Command::Test {
            file,
            cases,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            let (source, cases) = (read(&file)?, read(&cases)?);
            let answer = remote
                .api
                .test_policy_file(&source, &cases, &fresh_key())
                .await;
            answer.map(|answer| {
                remote.print(&answer, show_test);
                failed = !answer.view.passed;
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

/// The plan's lines: each change, each policy kept, the summary and the digest. An apply's
/// answer holds the same fields, so it shows through this too.
fn plan_lines(
    changes: &[PolicyFileChange],
    unchanged: &[String],
    summary: &PolicyFileSummary,
    digest: &str,
) -> String {
    let mut out = String::new();
    for change in changes {
        let version = match change.from_version {
            Some(v) => format!(" (from version {v})"),
            None => String::new(),
        };
        out.push_str(&format!(
            "{:<7} {}{version}\n",
            cell(&change.op),
            change.name
        ));
    }
    for name in unchanged {
        out.push_str(&format!("{:<7} {name}\n", "keep"));
    }
    out.push_str(&fields(&[
        (
            "summary",
            format!(
                "{} to create, {} to update, {} to delete, {} unchanged",
                summary.create, summary.update, summary.delete, summary.unchanged
            ),
        ),
        ("digest", digest.to_string()),
    ]));
    out
}

fn show_plan(plan: &PolicyFilePlan) -> String {
    plan_lines(&plan.changes, &plan.unchanged, &plan.summary, &plan.digest)
}

fn show_applied(applied: &PolicyFileApplied) -> String {
    let mut out = plan_lines(
        &applied.changes,
        &applied.unchanged,
        &applied.summary,
        &applied.digest,
    );
    let done = if applied.applied {
        "applied"
    } else {
        "nothing to apply: the policies already match the file"
    };
    out.push_str(&fields(&[("result", done.to_string())]));
    out
}

fn show_test(report: &PolicyFileTest) -> String {
    let mut out = String::new();
    for result in &report.results {
        let verdict = match result.passed {
            Some(true) => "pass",
            Some(false) => "FAIL",
            None => "-",
        };
        let name = match &result.name {
            Some(name) => name.clone(),
            None => format!("case {}", result.index),
        };
        let effect = match &result.effect {
            Some(effect) => cell(effect),
            None => "no policy applies".to_string(),
        };
        let policy = match &result.policy {
            Some(policy) => format!(" by {policy}"),
            None => String::new(),
        };
        out.push_str(&format!("{verdict:<5} {name}: {effect}{policy}\n"));
    }
    out
}
