//! `steward keys`: keys are created here, never over the API. The key is printed once.

use crate::DataArgs;
use anyhow::{bail, Context};
use std::process::ExitCode;
use steward_core::{EnvironmentId, KeyId, Role};
use steward_server::{generate_token, hash_token, open_store, Clock, SystemClock};
use steward_store::{Actor, ApiKeyRecord};

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
    },
    /// List keys: ids, names, environments and scopes, never the keys.
    List {
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

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Create {
            data,
            env,
            name,
            role,
            scopes,
        } => {
            if !valid_label(&env) {
                bail!("--env must be 1-64 characters of A-Z a-z 0-9 - _ .");
            }
            let scopes = match (role.as_deref(), scopes) {
                (_, Some(list)) => list
                    .into_iter()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect(),
                (Some(r), None) => Role::parse(r)
                    .with_context(|| format!("--role must be agent or operator, not {r}"))?
                    .scopes(),
                (None, None) => Role::Agent.scopes(),
            };
            let store = open_store(&data.data, data.database.as_deref()).await?;
            let now = SystemClock.now();
            let actor = Actor::system(now);
            let environment = store
                .ensure_environment(
                    &env,
                    &EnvironmentId::from_unique(&steward_server::unique()),
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
            };
            store.insert_key(&record, &actor).await?;
            println!("{token}");
            eprintln!("created {} in environment {env}", record.id);
            Ok(ExitCode::SUCCESS)
        }
        Command::List { data } => {
            let store = open_store(&data.data, data.database.as_deref()).await?;
            for key in store.list_keys().await? {
                let env = store
                    .environment(&key.env_id)
                    .await?
                    .map(|e| e.name)
                    .unwrap_or_default();
                println!(
                    "{}\t{}\t{}\t{}",
                    key.id,
                    key.name,
                    env,
                    key.scopes.join(",")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
