//! Read-only lookups at the provider: what does the provider's own record say about an effect?
//! Each adapter asks in its own way (`adapters/`); what it found is a [`Finding`], and the
//! helpers here are what every lookup shares: the credential opened for a header, the
//! destination checked, one GET under the dispatch deadline and the answer read under a bound.

use crate::dispatch::prepared::{open_secret, Blocked, OpenedSecret};
use crate::state::AppState;
use serde_json::Value;
use steward_core::{redact, AdapterSpec, Placement};
use steward_store::InvocationRecord;

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// The provider has the write. `confirmed` when its record says it completed.
    Found {
        confirmed: bool,
        reference: Option<String>,
        detail: String,
    },
    /// The provider has no record of the write.
    Absent { detail: String },
    /// The provider's record says the write definitively failed.
    ProviderFailed {
        reference: Option<String>,
        detail: String,
    },
    /// The lookup could not decide.
    Inconclusive { detail: String },
}

impl Finding {
    /// The finding with every secret value (in every encoding `redact` covers) scrubbed out of
    /// the provider's text it carries.
    pub fn redacted(self, secrets: &[String]) -> Finding {
        let text = |s: String| redact(&s, secrets);
        let reference = |r: Option<String>| r.map(text);
        match self {
            Finding::Found {
                confirmed,
                reference: r,
                detail,
            } => Finding::Found {
                confirmed,
                reference: reference(r),
                detail: text(detail),
            },
            Finding::Absent { detail } => Finding::Absent {
                detail: text(detail),
            },
            Finding::ProviderFailed {
                reference: r,
                detail,
            } => Finding::ProviderFailed {
                reference: reference(r),
                detail: text(detail),
            },
            Finding::Inconclusive { detail } => Finding::Inconclusive {
                detail: text(detail),
            },
        }
    }

    /// What the finding says, in words.
    pub fn detail(&self) -> &str {
        match self {
            Finding::Found { detail, .. }
            | Finding::Absent { detail }
            | Finding::ProviderFailed { detail, .. }
            | Finding::Inconclusive { detail } => detail,
        }
    }
}

/// Opens the adapter's credential for a lookup that carries it in a header; `Err` is the
/// finding to report instead.
pub async fn open_credential(
    state: &AppState,
    inv: &InvocationRecord,
    adapter: &AdapterSpec,
) -> Result<OpenedSecret, Finding> {
    let cannot = |message: String| Finding::Inconclusive {
        detail: format!("cannot look up: {message}"),
    };
    let credential = open_secret(state, &inv.env_id, &adapter.credential_secret)
        .await
        .map_err(|Blocked { message, .. }| cannot(message))?;
    credential
        .allow(Placement::Header)
        .map_err(|b| cannot(b.message))?;
    Ok(credential)
}

/// What one lookup GET answered: its status and its body, when the body is JSON.
pub struct Looked {
    pub status: u16,
    pub body: Option<Value>,
}

/// One lookup GET of `url` with `headers` (which may carry `credential`): the destination and
/// the credential's hosts are checked first, the call runs under the dispatch deadline and the
/// answer is read under `PROVIDER_ANSWER_BYTES_MAX`. `Err` is the finding to report instead.
pub async fn get(
    state: &AppState,
    url: &str,
    headers: &[(String, String)],
    credential: &OpenedSecret,
) -> Result<Looked, Finding> {
    let host = state
        .outbound
        .check(url)
        .await
        .map_err(|e| Finding::Inconclusive {
            detail: format!("cannot look up: {e}"),
        })?;
    credential
        .allow_host(&host)
        .map_err(|b| Finding::Inconclusive {
            detail: format!("cannot look up: {}", b.message),
        })?;
    let mut request = state.http.get(url).timeout(state.dispatch_timeout);
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request.build().map_err(|e| Finding::Inconclusive {
        detail: format!("lookup failed: {}", e.without_url()),
    })?;
    let exchange = state
        .transport
        .execute(request)
        .await
        .map_err(|f| Finding::Inconclusive {
            detail: format!("lookup failed: {}", f.summary),
        })?;
    let status = exchange.status;
    let body = exchange
        .body
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    Ok(Looked { status, body })
}
