//! Approval channels (issue #29 item 2): `POST/GET/DELETE /approval-channels` and `steward
//! channels add|list|remove`. A channel is a subscription to the `approvals` topic with its
//! kind in `channel` (`webhooks/channels.rs` renders and sends), so it is delivered by the same
//! durable cursor, leases, retry schedule and dead letters as a signed webhook, off the request
//! path. Reading needs `actions:read`; adding and removing need `actions:write`.
//!
//! A Slack URL is a credential: it is sealed by the vault as the subscription's secret and never
//! shown, logged or audited; the stored `url` is only its origin.

use super::{Error, Principal, Result};
use crate::state::AppState;
use crate::webhooks::channels::{
    self, SmtpSettings, CHANNEL_EVENT_TYPES, CHANNEL_KINDS, EMAIL_RECIPIENTS_MAX, SMTP_TLS_MODES,
};
use crate::webhooks::deliver::secret_name;
use serde_json::{json, Value};
use steward_core::scopes;
use steward_store::{Actor, SealedSecret, WebhookSubscription};
use steward_wire as wire;

/// The longest channel URL, in bytes.
pub const CHANNEL_URL_BYTES_MAX: usize = super::webhooks::WEBHOOK_URL_BYTES_MAX;

/// A new channel, checked: its kind, its settings (no credential), where it sends (shown) and
/// its credential (sealed).
pub struct NewChannel {
    pub kind: String,
    pub settings: Value,
    pub destination: String,
    credential: String,
}

impl std::fmt::Debug for NewChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewChannel")
            .field("kind", &self.kind)
            .field("destination", &self.destination)
            .finish_non_exhaustive()
    }
}

impl NewChannel {
    /// The body's fields, each checked, naming the field refused. The credential is never
    /// quoted in an error.
    pub async fn check(state: &AppState, body: wire::ApprovalChannelBody) -> Result<NewChannel> {
        let kind = body
            .kind
            .clone()
            .ok_or_else(|| Error::validation("kind", "is required"))?;
        if !CHANNEL_KINDS.contains(&kind.as_str()) {
            return Err(Error::validation(
                "kind",
                format!("must be one of: {}", CHANNEL_KINDS.join(", ")),
            ));
        }
        if kind == "email" {
            return email(state, body).await;
        }
        let url = body
            .url
            .map(wire::Credential::into_string)
            .ok_or_else(|| Error::validation("url", "is required for a slack channel"))?;
        if url.len() > CHANNEL_URL_BYTES_MAX {
            return Err(Error::validation(
                "url",
                format!("must be at most {CHANNEL_URL_BYTES_MAX} bytes"),
            ));
        }
        let destination = channels::origin(&url)
            .ok_or_else(|| Error::validation("url", "must be an absolute http(s) URL"))?;
        if state.outbound.check(&url).await.is_err() {
            return Err(Error::validation(
                "url",
                "is refused by the outbound policy (https to a public address; \
                 --allow-insecure-destinations for local receivers)",
            ));
        }
        Ok(NewChannel {
            settings: channels::settings(&kind),
            kind,
            destination,
            credential: url,
        })
    }
}

/// An `email` channel's fields, each checked, naming the field refused.
async fn email(state: &AppState, body: wire::ApprovalChannelBody) -> Result<NewChannel> {
    let host = body
        .host
        .filter(|h| !h.trim().is_empty())
        .ok_or_else(|| Error::validation("host", "is required for an email channel"))?;
    if host.len() > 253
        || host
            .chars()
            .any(|c| c.is_whitespace() || c == '/' || c == '@')
    {
        return Err(Error::validation(
            "host",
            "must be a host name or an address",
        ));
    }
    let tls = body.tls.unwrap_or_else(|| "tls".into());
    if !SMTP_TLS_MODES.contains(&tls.as_str()) {
        return Err(Error::validation(
            "tls",
            format!("must be one of: {}", SMTP_TLS_MODES.join(", ")),
        ));
    }
    let port = body.port.unwrap_or(match tls.as_str() {
        "tls" => 465,
        "starttls" => 587,
        _ => 25,
    });
    let address = |field: &str, text: &str| -> Result<()> {
        text.parse::<lettre::message::Mailbox>()
            .map(|_| ())
            .map_err(|_| Error::validation(field, "must be an email address"))
    };
    let from = body
        .from
        .ok_or_else(|| Error::validation("from", "is required for an email channel"))?;
    address("from", &from)?;
    let to = body.to.unwrap_or_default();
    if to.is_empty() || to.len() > EMAIL_RECIPIENTS_MAX {
        return Err(Error::validation(
            "to",
            format!("must list 1 to {EMAIL_RECIPIENTS_MAX} addresses"),
        ));
    }
    for t in &to {
        address("to", t)?;
    }
    let settings = SmtpSettings {
        host,
        port,
        tls,
        from,
        to,
        username: body.username,
    };
    if state.outbound.check(&settings.policy_url()).await.is_err() {
        return Err(Error::validation(
            "host",
            "is refused by the outbound policy (a public address; plain SMTP and local \
             servers need --allow-insecure-destinations)",
        ));
    }
    let destination = format!(
        "smtp://{}:{} to {}",
        settings.host,
        settings.port,
        settings.to.join(", ")
    );
    let mut stored = serde_json::to_value(&settings)
        .map_err(|e| Error::internal("storing SMTP settings", &e))?;
    stored["kind"] = json!("email");
    Ok(NewChannel {
        kind: "email".into(),
        settings: stored,
        destination,
        credential: body
            .password
            .map(wire::Credential::into_string)
            .unwrap_or_default(),
    })
}

/// Adds a channel; it sends the approvals requested (and decided) from now on.
pub async fn add(
    state: &AppState,
    principal: &Principal,
    new: &NewChannel,
) -> Result<WebhookSubscription> {
    principal.require(scopes::ACTIONS_WRITE)?;
    let now = state.clock.now();
    let head = state.store.audit_head().await?.seq;
    let mut s = WebhookSubscription {
        id: format!("apc_{}", crate::clock::unique().to_ascii_lowercase()),
        env_id: principal.env.id.clone(),
        topic: "approvals".into(),
        url: new.destination.clone(),
        event_types: CHANNEL_EVENT_TYPES.iter().map(|t| t.to_string()).collect(),
        enabled: true,
        headers: json!({}),
        secret: SealedSecret {
            nonce: vec![],
            sealed: vec![],
        },
        previous_secret: None,
        previous_until: None,
        cursor: head,
        attempts: 0,
        next_attempt_at: now,
        last_error: None,
        created_at: now,
        updated_at: now,
        lease_epoch: 0,
        channel: Some(new.settings.clone()),
    };
    let (nonce, sealed) = state
        .vault
        .seal(&s.env_id, &secret_name(&s.id), &new.credential)
        .map_err(|e| Error::internal("sealing a channel's credential", &e))?;
    s.secret = SealedSecret { nonce, sealed };
    let actor = Actor::key(&principal.key.id, now);
    state.store.create_subscription(&s, &actor).await?;
    Ok(s)
}

/// The environment's approval channels, oldest first.
pub async fn list(state: &AppState, principal: &Principal) -> Result<Vec<WebhookSubscription>> {
    principal.require(scopes::ACTIONS_READ)?;
    let all = state
        .store
        .subscriptions(&principal.env.id, Some("approvals"))
        .await?;
    Ok(all.into_iter().filter(|s| s.channel.is_some()).collect())
}

/// Removes the channel `id` (its dead letters stay).
pub async fn remove(state: &AppState, principal: &Principal, id: &str) -> Result<()> {
    principal.require(scopes::ACTIONS_WRITE)?;
    let found = state.store.subscription(&principal.env.id, id).await?;
    if found.is_none_or(|s| s.channel.is_none()) {
        return Err(Error::not_found("approval channel"));
    }
    let actor = Actor::key(&principal.key.id, state.clock.now());
    if !state
        .store
        .delete_subscription(&principal.env.id, id, &actor)
        .await?
    {
        return Err(Error::not_found("approval channel"));
    }
    Ok(())
}
