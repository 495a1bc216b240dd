//! `steward receipt verify`: checks signed receipts offline, with nothing but the file and the
//! public keys (no server, no store): each signature, and for several receipts the chain
//! between them (`steward_core::receipt`, specified in `docs/RECEIPTS.md`).

use anyhow::{bail, Context};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use steward_core::receipt::{verify_chain, PublicKeys};

/// The largest receipt file read, in bytes (64 MiB: a chain of some 50,000 receipts).
const RECEIPT_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Verify a receipt, or a chain of one environment's receipts in sequence order: every
    /// signature, and that each receipt follows the one before (no gap, no change, no
    /// reordering). FILE holds one receipt (a JSON object), a JSON array of them, one per line
    /// (JSONL), or an API answer (`{"success": true, "data": ...}`). Exits 0 when everything
    /// verifies, 1 otherwise, saying where it broke.
    Verify {
        /// The receipt file (`-` for standard input).
        file: PathBuf,
        /// A public key: 64 hex digits, or a file of them (one per line, optionally after the
        /// key id: `steward keys receipt-public-key --all`), or the JSON of
        /// `GET /api/v2/receipts/public-keys`. Repeat for the keys of a rotation.
        #[arg(long = "public-key", required = true, value_name = "KEY")]
        public_keys: Vec<String>,
    },
}

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    let Command::Verify { file, public_keys } = command;
    let keys = load_keys(&public_keys)?;
    let receipts = read_receipts(&file)?;
    match verify_chain(&receipts, &keys) {
        Ok(report) => {
            let start = if report.from_genesis {
                "from the environment's first receipt".to_string()
            } else {
                format!(
                    "continuing a chain at sequence {} (the receipts before it are not in the file)",
                    report.first_sequence
                )
            };
            println!(
                "verified: {} receipt(s) of environment {}, sequence {} to {}, {start}; head {}",
                report.receipts,
                report.environment_id,
                report.first_sequence,
                report.last_sequence,
                report.head_digest
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("NOT verified: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Every key the `--public-key` values give.
fn load_keys(values: &[String]) -> anyhow::Result<PublicKeys> {
    let mut keys = PublicKeys::default();
    for value in values {
        let text = if Path::new(value).is_file() {
            std::fs::read_to_string(value).with_context(|| format!("reading {value}"))?
        } else {
            value.clone()
        };
        for key in key_texts(&text) {
            keys.add_hex(&key)
                .map_err(|e| anyhow::anyhow!("public key {key:?}: {e}"))?;
        }
    }
    if keys.is_empty() {
        bail!("no public key given");
    }
    Ok(keys)
}

/// The hex keys in a `--public-key` text: the API's answer, or lines of `[keyId] hex`.
fn key_texts(text: &str) -> Vec<String> {
    if let Ok(doc) = serde_json::from_str::<Value>(text) {
        let list = doc.get("data").unwrap_or(&doc);
        if let Some(items) = list.as_array() {
            return items
                .iter()
                .filter_map(|k| k.get("publicKey").and_then(Value::as_str))
                .map(str::to_string)
                .collect();
        }
    }
    text.lines()
        .filter_map(|line| line.split_whitespace().last())
        .map(str::to_string)
        .collect()
}

/// The receipts in a file: an object, an array, JSON lines, or an API answer of either.
fn read_receipts(file: &Path) -> anyhow::Result<Vec<Value>> {
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::take(std::io::stdin(), RECEIPT_FILE_BYTES_MAX)
            .read_to_string(&mut text)
            .context("reading standard input")?;
        text
    } else {
        let size = std::fs::metadata(file)
            .with_context(|| format!("reading {}", file.display()))?
            .len();
        if size > RECEIPT_FILE_BYTES_MAX {
            bail!(
                "{} is {size} bytes; at most {RECEIPT_FILE_BYTES_MAX} are read",
                file.display()
            );
        }
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let parsed = match serde_json::from_str::<Value>(&text) {
        Ok(value) => value,
        Err(_) => Value::Array(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .enumerate()
                .map(|(i, line)| {
                    serde_json::from_str(line)
                        .with_context(|| format!("line {} is not JSON", i + 1))
                })
                .collect::<anyhow::Result<Vec<Value>>>()?,
        ),
    };
    let parsed = match parsed {
        Value::Object(mut o) if o.get("success") == Some(&Value::Bool(true)) => {
            o.remove("data").unwrap_or(Value::Null)
        }
        other => other,
    };
    match parsed {
        Value::Array(items) if !items.is_empty() => Ok(items),
        Value::Object(_) => Ok(vec![parsed]),
        _ => bail!("{} holds no receipt", file.display()),
    }
}
