//! `steward webhooks dlq list|redeliver`: a running server's webhook dead letters, and
//! redelivering one of them or all of a subscription's (issue #30 item 4). A redelivery is a
//! durable, audited request; the subscription's worker POSTs each letter once and records the
//! answer, which `dlq list` shows (`redelivered`, or `dead` again with the error).

use super::super::remote::{fresh_key, Remote, RemoteArgs};
use super::super::table::{age, listing, now};
use steward_wire::{DeadLetter, RedeliveryRequested};

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
            let answer = remote.api.dead_letters().await?;
            remote.print(&answer, |letters| list(letters));
        }
        Dlq::Redeliver {
            id,
            subscription,
            remote,
        } => {
            let remote = Remote::connect(&remote)?;
            match (id, subscription) {
                (_, Some(subscription)) => {
                    let answer = remote
                        .api
                        .redeliver_subscription(&subscription, &fresh_key())
                        .await?;
                    remote.print(&answer, requested);
                }
                (Some(id), None) => {
                    let answer = remote.api.redeliver_dead_letter(&id, &fresh_key()).await?;
                    remote.print(&answer, |letter| list(std::slice::from_ref(letter)));
                }
                (None, None) => anyhow::bail!("name a dead letter or --subscription"),
            }
        }
    }
    Ok(())
}

fn list(letters: &[DeadLetter]) -> String {
    let now = now();
    listing(
        letters,
        &[
            ("ID", &|d: &DeadLetter| d.id.clone()),
            ("SUBSCRIPTION", &|d: &DeadLetter| d.subscription_id.clone()),
            ("EVENT", &|d: &DeadLetter| d.event_id.clone()),
            ("TYPE", &|d: &DeadLetter| d.event_type.clone()),
            ("ATTEMPTS", &|d: &DeadLetter| d.attempts.to_string()),
            ("LAST ERROR", &|d: &DeadLetter| d.last_error.clone()),
            ("REDELIVERY", &|d: &DeadLetter| d.redelivery.clone()),
            ("AGE", &|d: &DeadLetter| age(Some(&d.created_at), now)),
        ],
    )
}

fn requested(r: &RedeliveryRequested) -> String {
    format!(
        "{} dead letter(s) of {} requested for redelivery{}{}\n",
        r.requested,
        r.subscription_id,
        if r.dead_letter_ids.is_empty() {
            ""
        } else {
            ": "
        },
        r.dead_letter_ids.join(", ")
    )
}
