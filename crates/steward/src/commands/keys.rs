//! `steward keys`: keys are created, rotated and revoked here, never over the API. A key is
//! printed once, on stdout, and nothing else is.
//!
//! A revocation or rotation commits to the database (with its audit event) and takes effect on
//! every server sharing it at the next request: servers read keys from the store per request.

use crate::DataArgs;
use anyhow::{bail, Context};
use std::process::ExitCode;
use steward_core::{EnvironmentId, KeyId, Millis, Role};
use steward_server::{
    generate_token, hash_token, open_existing_store, rotate_receipt_key as rotate_receipt_key_in,
    verify_master_key, Clock, SystemClock, Vault,
};
use steward_store::{Actor, ApiKeyRecord, KeyRotation};

/// The longest `--expires-in` or `--overlap-s` accepted, in seconds (ten years): longer is
/// "never", which is what leaving `--expires-in` out says; the bound keeps every sum of
/// milliseconds far from overflowing.
const DURATION_S_MAX: i64 = 10 * 365 * 86_400;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Create a key; prints only the key on stdout.
    Create {
        #[command(flatten)]
        data: DataArgs,
        /// The environment (created on first use).
        #[arg(long)]
        env: String,
        /// A label for the key.
        #[arg(long)]
        name: String,
        /// A default scope set: agent (invoke and read) or operator (everything).
        #[arg(long, conflicts_with = "scopes")]
        role: Option<String>,
        /// An explicit comma-separated scope list.
        #[arg(long, value_delimiter = ',')]
        scopes: Option<Vec<String>>,
        /// The key stops working this long after creation: a whole number and a unit,
        /// s (seconds), m (minutes), h (hours) or d (days), e.g. 3600s, 12h, 30d. Without it
        /// the key works until it is revoked.
        #[arg(long, value_name = "DURATION")]
        expires_in: Option<String>,
    },
    /// List keys: ids, names, environments, scopes, creation, expiry, last use (to within a
    /// minute) and state (active, expired, revoked); never the keys.
    List {
        #[command(flatten)]
        data: DataArgs,
    },
    /// Revoke a key: its next request, on any server, is refused with 401.
    Revoke {
        #[command(flatten)]
        data: DataArgs,
        /// The key's id (key_...), as `keys list` shows it.
        key_id: String,
    },
    /// Replace a key with a new one of the same environment, name and scopes; prints only the
    /// new key on stdout. The old key keeps working for the overlap, then gets 401.
    Rotate {
        #[command(flatten)]
        data: DataArgs,
        /// The key's id (key_...), as `keys list` shows it.
        key_id: String,
        /// How long the old key keeps working, in seconds (0: it stops at once).
        #[arg(long, default_value_t = 0)]
        overlap_s: i64,
        /// The new key's lifetime (as for `create`). Without it, a key that expires is
        /// replaced by one with the same lifetime from now, and one that does not by one that
        /// does not.
        #[arg(long, value_name = "DURATION")]
        expires_in: Option<String>,
    },
    /// Print the public key that verifies signed receipts (hex, on stdout): the current one,
    /// or with --all every key ever made, one `keyId publicKey` line each, oldest first.
    ReceiptPublicKey {
        #[command(flatten)]
        data: DataArgs,
        #[arg(long)]
        all: bool,
    },
    /// Make a new receipt signing key: receipts issued from now on are signed with it. Older
    /// keys stay published, so receipts signed before keep verifying. Prints the new public key.
    RotateReceiptKey {
        #[command(flatten)]
        data: DataArgs,
    },
}

fn valid_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Parses `--expires-in`: a whole positive number and one unit, `s`, `m`, `h` or `d`; in
/// seconds.
fn parse_duration_s(text: &str) -> Result<i64, String> {
    let usage = || {
        format!("{text:?}: expected a whole number and a unit s, m, h or d (e.g. 30d, 12h, 3600s)")
    };
    let Some((last, _)) = text.char_indices().last() else {
        return Err(usage());
    };
    let (number, unit) = text.split_at(last);
    let unit_s = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(usage()),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(usage());
    }
    let seconds = number
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_s))
        .filter(|s| (1..=DURATION_S_MAX).contains(s))
        .ok_or_else(|| {
            format!(
                "{text:?}: must be between 1s and {}d",
                DURATION_S_MAX / 86_400
            )
        })?;
    Ok(seconds)
}

fn expires_at(now: Millis, expires_in: Option<&str>) -> anyhow::Result<Option<Millis>> {
    expires_in
        .map(|text| {
            parse_duration_s(text)
                .map(|s| now.plus_ms(s * 1_000))
                .map_err(|e| anyhow::anyhow!("--expires-in {e}"))
        })
        .transpose()
}

fn parse_key_id(text: &str) -> anyhow::Result<KeyId> {
    KeyId::parse(text).map_err(|_| anyhow::anyhow!("{text:?} is not a key id (key_...)"))
}

/// A key's state for `keys list`.
fn state(key: &ApiKeyRecord, now: Millis) -> &'static str {
    if key.revoked_at.is_some() {
        "revoked"
    } else if key.usable_at(now) {
        "active"
    } else {
        "expired"
    }
}

fn when(at: Option<Millis>) -> String {
    at.map_or_else(|| "-".to_string(), Millis::to_rfc3339)
}

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Create {
            data,
            env,
            name,
            role,
            scopes,
            expires_in,
        } => create(data, env, name, role, scopes, expires_in).await,
        Command::List { data } => list(data).await,
        Command::Revoke { data, key_id } => revoke(data, key_id).await,
        Command::Rotate {
            data,
            key_id,
            overlap_s,
            expires_in,
        } => rotate(data, key_id, overlap_s, expires_in).await,
        Command::ReceiptPublicKey { data, all } => receipt_public_key(data, all).await,
        Command::RotateReceiptKey { data } => rotate_receipt_key(data).await,
    }
}

/// `keys receipt-public-key`.
async fn receipt_public_key(data: DataArgs, all: bool) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(&data.data, data.database.as_deref()).await?;
    let keys = store.receipt_keys().await?;
    let Some(current) = keys.last() else {
        bail!("no receipt signing key yet: `steward serve` makes one at its first start");
    };
    if all {
        for key in &keys {
            println!("{} {}", key.id, key.public_key);
        }
    } else {
        println!("{}", current.public_key);
    }
    Ok(ExitCode::SUCCESS)
}

/// `keys rotate-receipt-key`: the vault must open with the master key this store's secrets
/// were sealed with, as at `serve`.
async fn rotate_receipt_key(data: DataArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(&data.data, data.database.as_deref()).await?;
    let vault = Vault::open_or_create(&data.data)?;
    let now = SystemClock.now();
    verify_master_key(store.as_ref(), &vault, now).await?;
    let key = rotate_receipt_key_in(store.as_ref(), &vault, now).await?;
    eprintln!("receipts are signed with {} from now on", key.id);
    println!("{}", key.public_key);
    Ok(ExitCode::SUCCESS)
}

/// The scopes a new key gets: the explicit list, else the role's, else an agent's.
fn scopes_of(role: Option<&str>, scopes: Option<Vec<String>>) -> anyhow::Result<Vec<String>> {
    Ok(match (role, scopes) {
        (_, Some(list)) => list
            .into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        (Some(r), None) => Role::parse(r)
            .with_context(|| format!("--role must be agent or operator, not {r}"))?
            .scopes(),
        (None, None) => Role::Agent.scopes(),
    })
}

/// `keys create`.
async fn create(
    data: DataArgs,
    env: String,
    name: String,
    role: Option<String>,
    scopes: Option<Vec<String>>,
    expires_in: Option<String>,
) -> anyhow::Result<ExitCode> {
    if !valid_label(&env) {
        bail!("--env must be 1-64 characters of A-Z a-z 0-9 - _ .");
    }
    let scopes = scopes_of(role.as_deref(), scopes)?;
    let now = SystemClock.now();
    let expires_at = expires_at(now, expires_in.as_deref())?;
    let store = open_existing_store(&data.data, data.database.as_deref()).await?;
    let actor = Actor::system(now);
    let environment = store
        .ensure_environment(
            steward_store::NewEnvironment {
                name: &env,
                id: &EnvironmentId::from_unique(&steward_server::unique()),
            },
            &actor,
        )
        .await?;
    let token = generate_token();
    let record = ApiKeyRecord {
        id: KeyId::from_unique(&steward_server::unique()),
        env_id: environment.id,
        name,
        scopes,
        token_hash: hash_token(&token),
        created_at: now,
        expires_at,
        revoked_at: None,
        last_used_at: None,
    };
    store.insert_key(&record, &actor).await?;
    println!("{token}");
    eprintln!("created {} in environment {env}", record.id);
    Ok(ExitCode::SUCCESS)
}

/// `keys list`.
async fn list(data: DataArgs) -> anyhow::Result<ExitCode> {
    let store = open_existing_store(&data.data, data.database.as_deref()).await?;
    let now = SystemClock.now();
    println!("id\tname\tenvironment\tscopes\tcreated\texpires\tlast_used\tstate");
    for key in store.list_keys().await? {
        let env = store
            .environment(&key.env_id)
            .await?
            .map(|e| e.name)
            .unwrap_or_default();
        println!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            key.id,
            key.name,
            env,
            key.scopes.join(","),
            key.created_at.to_rfc3339(),
            when(key.expires_at),
            when(key.last_used_at),
            state(&key, now),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `keys revoke`.
async fn revoke(data: DataArgs, key_id: String) -> anyhow::Result<ExitCode> {
    let id = parse_key_id(&key_id)?;
    let store = open_existing_store(&data.data, data.database.as_deref()).await?;
    let now = SystemClock.now();
    match store.key(&id).await? {
        None => bail!("no key {id}"),
        Some(key) if key.revoked_at.is_some() => {
            eprintln!("{id} was already revoked");
        }
        Some(_) => {
            if store.revoke_key(&id, &Actor::system(now)).await? {
                eprintln!("revoked {id}");
            } else {
                eprintln!("{id} was already revoked");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `keys rotate`.
async fn rotate(
    data: DataArgs,
    key_id: String,
    overlap_s: i64,
    expires_in: Option<String>,
) -> anyhow::Result<ExitCode> {
    let id = parse_key_id(&key_id)?;
    if !(0..=DURATION_S_MAX).contains(&overlap_s) {
        bail!("--overlap-s must be between 0 and {DURATION_S_MAX}");
    }
    let now = SystemClock.now();
    let requested = expires_at(now, expires_in.as_deref())?;
    let store = open_existing_store(&data.data, data.database.as_deref()).await?;
    let Some(old) = store.key(&id).await?.filter(|k| k.usable_at(now)) else {
        bail!("no usable key {id} (it does not exist, or is revoked or expired)");
    };
    let new_expires_at = requested.or_else(|| {
        old.expires_at
            .map(|at| now.plus_ms(at.0.saturating_sub(old.created_at.0)))
    });
    let token = generate_token();
    let rotation = KeyRotation {
        old: id.clone(),
        new_id: KeyId::from_unique(&steward_server::unique()),
        new_token_hash: hash_token(&token),
        new_expires_at,
        old_expires_at: now.plus_ms(overlap_s * 1_000),
    };
    let new = store
        .rotate_key(&rotation, &Actor::system(now))
        .await
        .with_context(|| format!("cannot rotate {id}"))?;
    println!("{token}");
    eprintln!(
        "created {} to replace {id}, which stops working at {}",
        new.id,
        rotation.old_expires_at.to_rfc3339()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_in_takes_a_number_and_a_unit() {
        assert_eq!(parse_duration_s("3600s"), Ok(3_600));
        assert_eq!(parse_duration_s("15m"), Ok(900));
        assert_eq!(parse_duration_s("12h"), Ok(43_200));
        assert_eq!(parse_duration_s("30d"), Ok(2_592_000));
        for bad in [
            "",
            "s",
            "30",
            "30x",
            "-1d",
            "0s",
            "1.5h",
            "+3d",
            "3 d",
            "99999999999999999999d",
            "3651d",
            "1é",
        ] {
            assert!(parse_duration_s(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
