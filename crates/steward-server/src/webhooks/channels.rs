//! Approval channels (issue #29 item 2): subscriptions to the `approvals` topic that deliver to
//! people instead of to a program. A channel is a [`WebhookSubscription`] with `channel` set, so
//! it rides the same durable cursor over the sealed audit log, the same leases, retry schedule
//! and dead letters as a signed webhook (`deliver.rs`); only the last step differs: instead of
//! POSTing the signed event, [`send`] renders a message for a person and sends that.
//!
//! - `slack`: a Slack-compatible incoming webhook. Its URL is a credential (whoever holds it can
//!   post to the channel), so it is sealed by the vault as the subscription's secret; the stored
//!   `url` is only its origin, for display.
//! - `email`: SMTP through `lettre` (tokio, rustls): host, port, TLS mode (`tls`, `starttls`,
//!   or `none`, which needs `--allow-insecure-destinations`), from, to, and an optional user
//!   whose password is sealed as the subscription's secret. The same message as plain text.
//!
//! A message carries the action, a bounded summary of the input ([`summary`]: fields whose name
//! suggests a credential and long values elided), the requester, what is still needed, and a
//! link to the approval in the console (`--public-url`). The outcome (decided, expired) is a
//! second, shorter message. Nothing else of the approval is sent: never a secret.

use super::WEBHOOK_TIMEOUT_MS;
use crate::state::AppState;
use serde_json::{json, Map, Value};
use std::time::Duration;
use steward_core::ApprovalId;
use steward_store::{ApprovalRecord, WebhookSubscription};

/// The channel kinds Steward sends to; a signed webhook has no channel.
pub const CHANNEL_KINDS: &[&str] = &["slack", "email"];
/// The TLS modes of an `email` channel: TLS from the first byte, STARTTLS, or none.
pub const SMTP_TLS_MODES: &[&str] = &["tls", "starttls", "none"];
/// The most recipients an `email` channel sends to, in addresses.
pub const EMAIL_RECIPIENTS_MAX: usize = 20;
/// The event types a channel delivers: each new pending approval and its outcome.
pub const CHANNEL_EVENT_TYPES: &[&str] =
    &["approval.requested", "approval.decided", "approval.expired"];
/// The longest input summary a message carries, in bytes (about a screenful of chat).
pub const SUMMARY_BYTES_MAX: usize = 1_000;
/// The longest single value shown in a summary, in bytes; a longer one reads `…(N bytes)`.
pub const SUMMARY_VALUE_BYTES_MAX: usize = 80;
/// The most input fields a summary lists, in fields; the rest are counted.
pub const SUMMARY_FIELDS_MAX: usize = 12;
/// Field names (lowercase, by substring) whose values a summary never shows.
const SECRET_NAMES: &[&str] = &[
    "secret",
    "password",
    "passwd",
    "token",
    "apikey",
    "api_key",
    "api-key",
    "authorization",
    "credential",
    "private",
    "cookie",
    "session",
];

/// The vault name a channel's credential (Slack URL) is sealed under: the subscription's own.
pub(crate) fn credential_name(subscription: &str) -> String {
    super::secret_name(subscription)
}

/// The kind of a channel subscription (`slack`), `None` for a signed webhook.
pub fn kind(s: &WebhookSubscription) -> Option<&str> {
    s.channel.as_ref()?.get("kind")?.as_str()
}

/// A bounded, secret-free one-line-per-field summary of an approval's input: each top-level
/// field as `name: value`, values whose name suggests a credential shown as `[hidden]`, nested
/// objects and lists by their size, long values by their length, at most
/// [`SUMMARY_FIELDS_MAX`] fields and [`SUMMARY_BYTES_MAX`] bytes in all.
pub fn summary(input: &Value) -> String {
    let Some(fields) = input.as_object() else {
        return match input {
            Value::Null => "(no input)".into(),
            other => shown(other),
        };
    };
    if fields.is_empty() {
        return "(no input)".into();
    }
    let mut lines = Vec::new();
    let mut bytes = 0;
    for (i, (name, value)) in fields.iter().enumerate() {
        let lower = name.to_ascii_lowercase();
        let value = if SECRET_NAMES.iter().any(|s| lower.contains(s)) {
            "[hidden]".to_string()
        } else {
            shown(value)
        };
        let line = format!("{}: {value}", clip(name, SUMMARY_VALUE_BYTES_MAX));
        if i >= SUMMARY_FIELDS_MAX || bytes + line.len() + 1 > SUMMARY_BYTES_MAX {
            lines.push(format!("…and {} more fields", fields.len() - i));
            break;
        }
        bytes += line.len() + 1;
        lines.push(line);
    }
    lines.join("\n")
}

/// One value as a summary shows it: scalars as JSON, containers by size, long ones by length.
fn shown(value: &Value) -> String {
    let text = match value {
        Value::Object(m) => return format!("{{{} fields}}", m.len()),
        Value::Array(a) => return format!("[{} items]", a.len()),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.len() > SUMMARY_VALUE_BYTES_MAX {
        return format!("…({} bytes)", text.len());
    }
    text
}

/// `text` cut to at most `max` bytes on a character boundary.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// What a person is told: a title line and the body's lines, for any channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub title: String,
    pub lines: Vec<String>,
    /// The approval in the console, where it is approved or denied.
    pub link: String,
}

/// The message for `event` (an `approval.*` event) about `approval` as it stands, with links
/// under `base` (the console's public URL, no trailing slash). `None` for another event.
pub fn render(event: &Value, approval: &ApprovalRecord, base: &str) -> Option<Message> {
    let id = approval.id.to_string();
    let action = approval
        .payload
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or(&approval.title);
    let link = format!("{base}/console/#{id}");
    let kind = event.get("type").and_then(Value::as_str)?;
    let message = match kind {
        "approval.requested" => {
            let mut lines = vec![
                format!("Action: {}", clip(action, SUMMARY_VALUE_BYTES_MAX)),
                format!("Requested by: {}", approval.requested_by),
                format!("Approvals needed: {}", approval.required_approvals),
            ];
            if let Some(v) = approval
                .payload
                .get("actionVersion")
                .and_then(Value::as_u64)
            {
                lines.push(format!("Action version: {v}"));
            }
            if let Some(until) = approval.expires_at {
                lines.push(format!("Expires: {}", until.to_rfc3339()));
            }
            lines.push(format!(
                "Input:\n{}",
                summary(approval.payload.get("input").unwrap_or(&Value::Null))
            ));
            lines.push(format!("Approve or deny: {link}"));
            Message {
                title: format!("Approval requested: {} ({id})", clip(action, 80)),
                lines,
                link,
            }
        }
        "approval.decided" | "approval.expired" => {
            let outcome = event
                .pointer("/data/status")
                .and_then(Value::as_str)
                .unwrap_or(if kind == "approval.expired" {
                    "expired"
                } else {
                    "decided"
                });
            Message {
                title: format!("Approval {outcome}: {} ({id})", clip(action, 80)),
                lines: vec![format!("Details: {link}")],
                link,
            }
        }
        _ => return None,
    };
    Some(message)
}

/// The Slack incoming-webhook body for `m`: `text` for notifications and clients without
/// blocks, and a section per part.
pub fn slack_body(m: &Message) -> Value {
    let text = format!("{}\n{}", m.title, m.lines.join("\n"));
    json!({
        "text": text,
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": clip(&m.title, 150)}},
            {"type": "section", "text": {"type": "mrkdwn", "text": m.lines.join("\n")}},
        ],
    })
}

/// Sends `event` to the channel `s`: `Ok` once the destination accepted it (a 2xx), else why
/// not, for the retry schedule. Events a channel does not render are done with at once.
pub(crate) async fn send(
    state: &AppState,
    s: &WebhookSubscription,
    event: &Value,
    base: &str,
) -> Result<(), String> {
    let Some(id) = event
        .pointer("/data/approvalId")
        .and_then(Value::as_str)
        .and_then(|id| ApprovalId::parse(id).ok())
    else {
        return Ok(());
    };
    let approval = match state.store.approval(&s.env_id, &id).await {
        Ok(Some(a)) => a,
        Ok(None) => return Ok(()),
        Err(_) => return Err("the approval could not be read".into()),
    };
    let Some(message) = render(event, &approval, base) else {
        return Ok(());
    };
    match kind(s) {
        Some("slack") => post_slack(state, s, &message).await,
        Some("email") => send_email(state, s, &message).await,
        _ => Err("this channel's kind is not known to this Steward".into()),
    }
}

/// POSTs `m` to the Slack URL sealed as `s`'s secret, after the same outbound checks as a
/// dispatch. The URL never appears in an error (it is a credential).
async fn post_slack(state: &AppState, s: &WebhookSubscription, m: &Message) -> Result<(), String> {
    let url = state
        .vault
        .open(
            &s.env_id,
            &credential_name(&s.id),
            &s.secret.nonce,
            &s.secret.sealed,
        )
        .map_err(|_| "the channel's URL could not be opened".to_string())?;
    state
        .outbound
        .check(&url)
        .await
        .map_err(|_| "destination refused by the outbound policy".to_string())?;
    let response = state
        .http
        .post(&url)
        .timeout(Duration::from_millis(WEBHOOK_TIMEOUT_MS))
        .header("user-agent", "steward-approvals")
        .json(&slack_body(m))
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                "the channel did not answer in time".to_string()
            } else {
                "the channel could not be reached".to_string()
            }
        })?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    Err(format!("HTTP {}", status.as_u16()))
}

/// The `email` channel's settings as stored.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SmtpSettings {
    pub host: String,
    pub port: u16,
    /// One of [`SMTP_TLS_MODES`].
    pub tls: String,
    pub from: String,
    pub to: Vec<String>,
    /// Signs in as this user with the sealed password; `None`: no authentication.
    #[serde(default)]
    pub username: Option<String>,
}

impl SmtpSettings {
    /// The URL the outbound policy checks for this server: `https` for a TLS mode (the address
    /// checks), `http` for `none` (allowed only with `--allow-insecure-destinations`).
    pub fn policy_url(&self) -> String {
        let scheme = if self.tls == "none" { "http" } else { "https" };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{scheme}://{host}:{}/", self.port)
    }
}

/// The plain-text body of an email for `m`.
pub fn email_text(m: &Message) -> String {
    format!("{}\n\n{}\n", m.title, m.lines.join("\n"))
}

/// Sends `m` by SMTP to the channel's recipients, after the outbound checks. An error never
/// names the password.
async fn send_email(state: &AppState, s: &WebhookSubscription, m: &Message) -> Result<(), String> {
    use lettre::message::header::ContentType;
    use lettre::transport::smtp::authentication::Credentials;
    use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
    let settings: SmtpSettings = s
        .channel
        .clone()
        .and_then(|c| serde_json::from_value(c).ok())
        .ok_or_else(|| "the channel's SMTP settings could not be read".to_string())?;
    state
        .outbound
        .check(&settings.policy_url())
        .await
        .map_err(|_| "destination refused by the outbound policy".to_string())?;
    let password = state
        .vault
        .open(
            &s.env_id,
            &credential_name(&s.id),
            &s.secret.nonce,
            &s.secret.sealed,
        )
        .map_err(|_| "the channel's password could not be opened".to_string())?;
    let mut mail = lettre::Message::builder()
        .from(
            settings
                .from
                .parse()
                .map_err(|_| "bad from address".to_string())?,
        )
        .subject(clip(&m.title, 200))
        .header(ContentType::TEXT_PLAIN);
    for to in &settings.to {
        mail = mail.to(to
            .parse()
            .map_err(|_| "bad recipient address".to_string())?);
    }
    let mail = mail
        .body(email_text(m))
        .map_err(|_| "the message could not be built".to_string())?;
    let builder = match settings.tls.as_str() {
        "tls" => AsyncSmtpTransport::<Tokio1Executor>::relay(&settings.host),
        "starttls" => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&settings.host),
        _ => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(
            &settings.host,
        )),
    }
    .map_err(|_| "the SMTP server's TLS could not be set up".to_string())?;
    let mut builder = builder
        .port(settings.port)
        .timeout(Some(Duration::from_millis(WEBHOOK_TIMEOUT_MS)));
    if let Some(user) = &settings.username {
        builder = builder.credentials(Credentials::new(user.clone(), password));
    }
    match builder.build().send(mail).await {
        Ok(_) => Ok(()),
        Err(e) => Err(match e.status() {
            Some(code) => format!("SMTP {code}"),
            None if e.is_timeout() => "the SMTP server did not answer in time".to_string(),
            None => "the SMTP server could not be reached or refused the message".to_string(),
        }),
    }
}

/// The origin of a URL (`https://hooks.slack.com`), what a listing shows of a credential URL;
/// `None` when it does not parse.
pub fn origin(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    Some(parsed.origin().ascii_serialization())
}

/// A channel's stored settings for `kind` (never a credential).
pub fn settings(kind: &str) -> Value {
    let mut m = Map::new();
    m.insert("kind".into(), json!(kind));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::{ApprovalStatus, EnvironmentId, KeyId, Millis};

    fn approval(input: Value) -> ApprovalRecord {
        ApprovalRecord {
            id: ApprovalId::from_unique("01ABC"),
            env_id: EnvironmentId::from_unique("1"),
            status: ApprovalStatus::Pending,
            title: "Approve refund".into(),
            description: None,
            payload: json!({"action": "refund", "actionVersion": 2, "input": input}),
            invocation_id: None,
            effect_id: None,
            action_id: None,
            action_version: Some(2),
            input_fingerprint: None,
            requested_by: KeyId::from_unique("agent"),
            required_approvals: 1,
            decision_origin: None,
            edit: None,
            decided_at: None,
            expires_at: None,
            run_id: None,
            created_at: Millis(0),
            decisions: vec![],
        }
    }

    #[test]
    fn a_summary_hides_credentials_and_bounds_long_and_many_fields() {
        let long = "x".repeat(5_000);
        let s = summary(&json!({
            "amount": 125, "apiToken": "tok_live_123", "Password": "hunter2",
            "note": long, "items": [1, 2, 3], "address": {"city": "Paris"},
        }));
        assert!(s.contains("amount: 125"), "{s}");
        assert!(
            s.contains("apiToken: [hidden]") && !s.contains("tok_live_123"),
            "{s}"
        );
        assert!(
            s.contains("Password: [hidden]") && !s.contains("hunter2"),
            "{s}"
        );
        assert!(
            s.contains("note: …(5000 bytes)") && !s.contains("xxxxxxxxxx"),
            "{s}"
        );
        assert!(
            s.contains("items: [3 items]") && s.contains("address: {1 fields}"),
            "{s}"
        );

        let many: Map<String, Value> = (0..100).map(|i| (format!("f{i:03}"), json!(i))).collect();
        let s = summary(&Value::Object(many));
        assert!(s.lines().count() <= SUMMARY_FIELDS_MAX + 1, "{s}");
        assert!(
            s.ends_with(&format!("…and {} more fields", 100 - SUMMARY_FIELDS_MAX)),
            "{s}"
        );

        let wide: Map<String, Value> = (0..12)
            .map(|i| (format!("{i}{}", "k".repeat(70)), json!("v".repeat(79))))
            .collect();
        let s = summary(&Value::Object(wide));
        assert!(s.len() <= SUMMARY_BYTES_MAX + 40, "{} bytes", s.len());
        assert!(s.contains("more fields"), "{s}");
        assert_eq!(summary(&Value::Null), "(no input)");
    }

    #[test]
    fn a_request_names_the_action_requester_input_and_links_to_the_approval() {
        let a = approval(json!({"amount": 125, "secret": "s3cr3t"}));
        let event = json!({"type": "approval.requested", "data": {"approvalId": a.id.to_string()}});
        let m = render(&event, &a, "https://steward.example").expect("a message");
        let body = slack_body(&m).to_string();
        let link = format!("https://steward.example/console/#{}", a.id);
        assert_eq!(m.link, link);
        assert!(
            body.contains("refund") && body.contains("amount: 125"),
            "{body}"
        );
        assert!(body.contains(&a.requested_by.to_string()), "{body}");
        assert!(body.contains(&link), "{body}");
        assert!(!body.contains("s3cr3t"), "{body}");
    }

    #[test]
    fn an_outcome_says_how_it_ended_and_other_events_send_nothing() {
        let a = approval(json!({}));
        let decided = json!({"type": "approval.decided", "data": {"status": "approved"}});
        let m = render(&decided, &a, "http://h").expect("a message");
        assert!(
            m.title.starts_with("Approval approved: refund"),
            "{}",
            m.title
        );
        let expired = json!({"type": "approval.expired", "data": {}});
        let m = render(&expired, &a, "http://h").expect("a message");
        assert!(m.title.starts_with("Approval expired"), "{}", m.title);
        assert!(render(&json!({"type": "effect.settled"}), &a, "http://h").is_none());
    }

    #[test]
    fn an_email_is_the_same_message_as_text_and_smtp_is_checked_like_http() {
        let a = approval(json!({"amount": 5, "password": "pw-1"}));
        let event = json!({"type": "approval.requested"});
        let m = render(&event, &a, "https://s.example").expect("a message");
        let text = email_text(&m);
        assert!(text.starts_with(&m.title), "{text}");
        assert!(
            text.contains("amount: 5") && text.contains(&m.link),
            "{text}"
        );
        assert!(!text.contains("pw-1"), "{text}");
        let mut smtp = SmtpSettings {
            host: "127.0.0.1".into(),
            port: 2525,
            tls: "none".into(),
            from: "a@b.test".into(),
            to: vec!["c@d.test".into()],
            username: None,
        };
        assert_eq!(smtp.policy_url(), "http://127.0.0.1:2525/");
        smtp.tls = "starttls".into();
        smtp.host = "::1".into();
        assert_eq!(smtp.policy_url(), "https://[::1]:2525/");
    }

    #[test]
    fn only_the_origin_of_a_credential_url_is_shown() {
        assert_eq!(
            origin("https://hooks.slack.com/services/T0/B0/secret").as_deref(),
            Some("https://hooks.slack.com")
        );
        assert_eq!(origin("not a url"), None);
    }
}
