//! `steward webhooks dlq list|redeliver`: a running server's webhook dead letters, and
//! redelivering one of them or all of a subscription's (issue #30 item 4). A redelivery is a
//! durable, audited request; the subscription's worker POSTs each letter once and records the
//! answer, which `dlq list` shows (`redelivered`, or `dead` again with the error).

use super::super::remote::{fresh_key, Remote, RemoteArgs};
use super::super::table::{age, listing, now, text};
use serde_json::Value;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// The dead-letter list: events a subscription gave up on after its retry schedule.
    #[command(subcommand)]
    Dlq(Dlq),
}

#[derive(clap::Subcommand, Debug)]
pub enum Dlq {
    /// Dead letters, newest first (at most 100).
    List {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Redeliver one dead letter by id, or with --subscription every one of that subscription.
    Redeliver {
        /// The dead letter (`dlq_...`).
        #[arg(
            required_unless_present = "subscription",
            conflicts_with = "subscription"
        )]
        id: Option<String>,
        /// Every dead letter of this subscription (`whs_...`) not already requested.
        #[arg(long)]
        subscription: Option<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    let Command::Dlq(command) = command;
    match command {
        Dlq::List { remote } => {
            let remote = Remote::connect(&remote)?;
            let data = remote.api.dead_letters().await?;
            remote.print_json(&data, list);
        }
        Dlq::Redeliver {
            id,
            subscription,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            match (id, subscription) {
                (_, Some(subscription)) => {
                    let data = remote
                        .api
                        .redeliver_subscription(&subscription, &fresh_key())
                        .await?;
                    remote.print_json(&data, requested);
                }
                (Some(id), None) => {
                    let data = remote.api.redeliver_dead_letter(&id, &fresh_key()).await?;
                    remote.print_json(&data, |d| list(&Value::Array(vec![d.clone()])));
                }
                (None, None) => anyhow::bail!("name a dead letter or --subscription"),
            }
        }
    }
    Ok(())
}

fn list(data: &Value) -> String {
    let now = now();
    let field = |name: &'static str| move |d: &Value| text(&d[name]);
    listing(
        data.as_array().map(Vec::as_slice).unwrap_or_default(),
        &[
            ("ID", &field("id")),
            ("SUBSCRIPTION", &field("subscriptionId")),
            ("EVENT", &field("eventId")),
            ("TYPE", &field("eventType")),
            ("ATTEMPTS", &field("attempts")),
            ("LAST ERROR", &field("lastError")),
            ("REDELIVERY", &field("redelivery")),
            ("AGE", &|d: &Value| age(d["createdAt"].as_str(), now)),
        ],
    )
}
fn requested(data: &Value) -> String {
    let ids: Vec<&str> = data["deadLetterIds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    format!(
        "{} dead letter(s) of {} requested for redelivery{}{}\n",
        data["requested"],
        data["subscriptionId"].as_str().unwrap_or("-"),
        if ids.is_empty() { "" } else { ": " },
        ids.join(", ")
    )
}
