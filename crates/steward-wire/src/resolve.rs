//! Settling by hand: the bodies of `POST /actions/effects/{id}/resolve` and
//! `POST /actions/invocations/{id}/resolve`.

use crate::Text;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A manual outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ManualOutcome {
    Succeeded,
    Failed,
}

/// Whether part of the write may have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PartialEffect {
    None,
    Possible,
    Confirmed,
}

impl PartialEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            PartialEffect::None => "none",
            PartialEffect::Possible => "possible",
            PartialEffect::Confirmed => "confirmed",
        }
    }
}

/// `POST /actions/effects/{id}/resolve`. `outcome` and `reason` are required (the server names
/// the one missing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolveEffectBody {
    #[serde(default)]
    #[schema(required = true, value_type = ManualOutcome)]
    pub outcome: Option<ManualOutcome>,
    #[serde(default)]
    #[schema(required = true, value_type = String, min_length = 1)]
    pub reason: Option<Text>,
    #[serde(default)]
    pub partial_effect: Option<PartialEffect>,
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub actual_impact: Option<Vec<Value>>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub external_reference: Option<Text>,
}

/// `POST /actions/invocations/{id}/resolve`. `outcome` and `evidence` are required (the server
/// names the one missing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolveInvocationBody {
    #[serde(default)]
    #[schema(required = true, value_type = ManualOutcome)]
    pub outcome: Option<ManualOutcome>,
    #[serde(default)]
    #[schema(required = true, value_type = String, min_length = 1)]
    pub evidence: Option<Text>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub external_reference: Option<Text>,
}
