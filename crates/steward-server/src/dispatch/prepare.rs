//! Building the outgoing request from the recorded invocation and the exact action version it
//! names. Anything that means "must not send" becomes [`Blocked`], before any attempt exists.

use super::prepared::{open_from, Blocked, OpenedSecret, Prepared, PreparedBody};
use crate::state::AppState;
use serde_json::Value;
use std::collections::BTreeMap;
use steward_core::{render, secret_references, ActionDefinition, EnvironmentId, InvocationId};
use steward_store::{InvocationRecord, SecretRecord};

/// Renders the request of `inv` under `def`, opening the secrets it names (from `known` when
/// given, see [`open_from`]).
pub async fn prepare(
    state: &AppState,
    inv: &InvocationRecord,
    def: &ActionDefinition,
    effect_key: Option<&str>,
    known: Option<&[SecretRecord]>,
) -> Result<Prepared, Blocked> {
    let call = Call {
        env: &inv.env_id,
        invocation: &inv.id,
        input: inv.dispatch_input(),
    };
    prepare_call(state, call, def, effect_key, known).await
}

/// What a request is rendered for: the environment whose secrets it opens, the invocation id it
/// carries and the input. A preview renders one before the invocation exists.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    pub env: &'a EnvironmentId,
    pub invocation: &'a InvocationId,
    pub input: &'a Value,
}

/// [`prepare`] for a [`Call`].
pub async fn prepare_call(
    state: &AppState,
    call: Call<'_>,
    def: &ActionDefinition,
    effect_key: Option<&str>,
    known: Option<&[SecretRecord]>,
) -> Result<Prepared, Blocked> {
    if let Some(spec) = &def.adapter {
        let adapter = crate::adapters::find(&spec.kind).ok_or_else(|| {
            Blocked::new(
                "adapter_unknown",
                format!("this server has no {} adapter", spec.kind),
            )
        })?;
        let credential = open_from(state, call.env, &spec.credential_secret, known).await?;
        let key = effect_key
            .ok_or_else(|| Blocked::new("adapter_misconfigured", "no provider idempotency key"))?;
        let mut prepared = adapter.prepare(spec, call.input, call.invocation, key, credential)?;
        prepared.adapter = Some(spec.clone());
        return Ok(prepared);
    }
    let references =
        secret_references(def).map_err(|e| Blocked::new("template_invalid", e.to_string()))?;
    let mut secrets = Vec::new();
    let mut values = BTreeMap::new();
    for (name, placement) in references {
        let opened = match secrets.iter().position(|s: &OpenedSecret| s.name == name) {
            Some(i) => &secrets[i],
            None => {
                secrets.push(open_from(state, call.env, &name, known).await?);
                secrets.last().expect("just pushed")
            }
        };
        opened.allow(placement)?;
        values.insert(name, opened.value.clone());
    }
    let rendered = render(def, call.input, &values)
        .map_err(|e| Blocked::new("template_invalid", e.to_string()))?;
    let method = reqwest::Method::from_bytes(rendered.method.as_bytes())
        .map_err(|_| Blocked::new("template_invalid", "bad HTTP method"))?;
    Ok(Prepared {
        method,
        url: rendered.url,
        headers: rendered.headers,
        body: rendered.body.map(PreparedBody::Json),
        secrets,
        adapter: None,
    })
}
