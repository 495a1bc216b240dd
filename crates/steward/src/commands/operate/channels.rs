//! `steward channels add|list|remove`: a running server's approval channels (issue #29 item
//! 2), where each new pending approval and its outcome are sent for people. A credential (the
//! Slack URL, the SMTP password) is read from an environment variable, never from the command
//! line (which other users of the machine and shell history see), and never shown back.

use super::super::remote::{fresh_key, Remote, RemoteArgs};
use super::super::table::listing;
use serde_json::json;
use steward_wire::ApprovalChannel;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// The environment's approval channels.
    List {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Add a channel: `slack` (its URL from STEWARD_SLACK_URL) or `email` (SMTP; the password,
    /// if any, from STEWARD_SMTP_PASSWORD).
    #[command(subcommand)]
    Add(Add),
    /// Remove a channel by id (`apc_...`).
    Remove {
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum Add {
    /// A Slack-compatible incoming webhook; its URL is read from STEWARD_SLACK_URL.
    Slack {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Email over SMTP.
    Email {
        /// The SMTP server's host name or address.
        #[arg(long)]
        host: String,
        /// The SMTP port (default: 465 for tls, 587 for starttls, 25 for none).
        #[arg(long)]
        port: Option<u16>,
        /// `tls` (default), `starttls`, or `none` (needs the server's
        /// --allow-insecure-destinations).
        #[arg(long)]
        tls: Option<String>,
        /// The sender's address.
        #[arg(long)]
        from: String,
        /// A recipient (repeat for more, at most 20).
        #[arg(long, required = true)]
        to: Vec<String>,
        /// The SMTP user; its password is read from STEWARD_SMTP_PASSWORD.
        #[arg(long)]
        username: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::List { remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote.api.approval_channels().await?;
            remote.print(&answer, |channels| list(channels));
        }
        Command::Add(Add::Slack { remote }) => {
            let url = std::env::var("STEWARD_SLACK_URL").map_err(|_| {
                anyhow::anyhow!("set STEWARD_SLACK_URL to the incoming-webhook URL")
            })?;
            let remote = Remote::connect(&remote)?;
            let body = json!({"kind": "slack", "url": url});
            let answer = remote.api.add_approval_channel(&body, &fresh_key()).await?;
            remote.print(&answer, |c| list(std::slice::from_ref(c)));
        }
        Command::Add(Add::Email {
            host,
            port,
            tls,
            from,
            to,
            username,
            remote,
        }) => {
            let password = std::env::var("STEWARD_SMTP_PASSWORD").ok();
            if username.is_some() && password.is_none() {
                anyhow::bail!("set STEWARD_SMTP_PASSWORD to the SMTP user's password");
            }
            let remote = Remote::connect(&remote)?;
            let body = json!({"kind": "email", "host": host, "port": port, "tls": tls,
                "from": from, "to": to, "username": username, "password": password});
            let answer = remote.api.add_approval_channel(&body, &fresh_key()).await?;
            remote.print(&answer, |c| list(std::slice::from_ref(c)));
        }
        Command::Remove { id, remote } => {
            let remote = Remote::connect(&remote)?;
            let answer = remote
                .api
                .remove_approval_channel(&id, &fresh_key())
                .await?;
            remote.print(&answer, |d| format!("removed {}\n", d.id));
        }
    }
    Ok(())
}

fn list(channels: &[ApprovalChannel]) -> String {
    listing(
        channels,
        &[
            ("ID", &|c: &ApprovalChannel| c.id.clone()),
            ("KIND", &|c: &ApprovalChannel| c.kind.clone()),
            ("DESTINATION", &|c: &ApprovalChannel| c.destination.clone()),
            ("ATTEMPTS", &|c: &ApprovalChannel| c.attempts.to_string()),
            ("LAST ERROR", &|c: &ApprovalChannel| {
                c.last_error.clone().unwrap_or_default()
            }),
        ],
    )
}
