//! What every operator command shares: the server it talks to, the key it talks with, and how
//! it prints. Operator commands are API clients like the SDK: they read and decide through
//! `/api/v2` on a running server (any replica), never the database, so the server's rules
//! (separation of duties, scopes, environments) hold for them exactly as for everyone else. The
//! calls themselves, their typed answers and their errors are `steward_client::Operator`'s; this
//! file only turns the command line into one.

use anyhow::{bail, Context};
use steward_client::{Answer, Operator};
use steward_core::{IdempotencyKey, KeyId};

/// The environment variable the operator's key is read from (never a flag: flags are visible in
/// the process list).
pub const API_KEY_ENV: &str = "STEWARD_API_KEY";

/// The server an operator command talks to unless `--server` or `STEWARD_SERVER` says otherwise:
/// the address `steward serve` listens on by default.
pub const DEFAULT_SERVER: &str = steward_client::SERVER_DEFAULT;

/// Where and how an operator command talks to the server.
#[derive(clap::Args, Debug, Clone)]
pub struct RemoteArgs {
    /// The Steward server (the key comes from STEWARD_API_KEY); by default where `steward serve`
    /// listens by default.
    #[arg(long, env = "STEWARD_SERVER", global = true, default_value = DEFAULT_SERVER)]
    server: String,
    /// Print the API's JSON (`data`) instead of a table, for scripts.
    #[arg(long, global = true)]
    pub json: bool,
}

/// A server, a key, and how to print.
pub struct Remote {
    pub api: Operator,
    pub json: bool,
}

impl Remote {
    pub fn connect(args: &RemoteArgs) -> anyhow::Result<Remote> {
        let key = std::env::var(API_KEY_ENV)
            .ok()
            .filter(|k| !k.trim().is_empty())
            .with_context(|| format!("set {API_KEY_ENV} to an operator's API key"))?;
        let server = url::Url::parse(&args.server).context("--server must be a URL")?;
        if !matches!(server.scheme(), "http" | "https") {
            bail!("--server must be an http or https URL");
        }
        Ok(Remote {
            api: Operator::new(server, &key)?,
            json: args.json,
        })
    }

    /// Prints the API's `data` as JSON with `--json`, else the view through `human`.
    pub fn print<T>(&self, answer: &Answer<T>, human: impl FnOnce(&T) -> String) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&answer.data).unwrap_or_default()
            );
        } else {
            print!("{}", human(&answer.view));
        }
    }
}

/// A key as a table shows it: `key_... (name)` when the view names it (the server sends a key's
/// name beside its id), else the id alone.
pub fn named_key(id: &KeyId, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{id} ({name})"),
        None => id.to_string(),
    }
}

/// As [`named_key`]; `-` for no key (the system).
pub fn named_key_opt(id: Option<&KeyId>, name: Option<&str>) -> String {
    id.map_or_else(|| "-".to_string(), |id| named_key(id, name))
}

/// A fresh `Idempotency-Key` for one write of one command run, so a request the network cut off
/// can be told apart from one never sent.
#[allow(clippy::disallowed_methods)] // a fresh key per command run; the CLI has no clock seam
pub fn fresh_key() -> IdempotencyKey {
    IdempotencyKey::parse(&format!("cli-{}", ulid::Ulid::new()))
        .expect("`cli-` and a ULID make a valid idempotency key")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_server_is_where_serve_listens_by_default() {
        assert_eq!(
            DEFAULT_SERVER,
            format!("http://{}", crate::commands::serve::DEFAULT_LISTEN)
        );
    }

    #[test]
    fn a_named_key_shows_its_name_beside_its_id_and_an_unnamed_one_its_id() {
        let me = KeyId::parse("key_01me").unwrap();
        let other = KeyId::parse("key_01other").unwrap();
        assert_eq!(named_key(&me, Some("ops")), "key_01me (ops)");
        assert_eq!(named_key(&other, None), "key_01other");
        assert_eq!(named_key_opt(Some(&me), Some("ops")), "key_01me (ops)");
        assert_eq!(named_key_opt(None, None), "-");
    }
}
