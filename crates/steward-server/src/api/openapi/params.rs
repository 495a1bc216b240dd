//! The path parameters several handlers share, as the structs they extract (`Path<IdPath>`)
//! and describe (`params(IdPath)`), the `Idempotency-Key` header, and the string enums of the
//! query parameters whose values the core defines.
//!
//! Query parameters are described on the handlers' own query structs (`#[derive(IntoParams)]`),
//! so they cannot drift from what the handlers read; a path parameter only one handler file
//! takes lives beside it (`TopicPath`, `SecretNamePath`, `ApiKeyPath`).

use serde::Deserialize;
use steward_core::{ApprovalStatus, EffectState, Grade, InvocationStatus};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, PartialSchema, ToSchema};

/// `Idempotency-Key`: the first answer under a key is recorded and a resend with the same request
/// gets it again (with `idempotent-replayed: true`); a different request under the key is 422.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Described here, read by `body::idempotency_key`.
pub struct IdempotencyHeader {
    /// Printable ASCII, 1 to 255 bytes, chosen by the client.
    #[param(
        rename = "Idempotency-Key",
        min_length = 1,
        max_length = 255,
        pattern = r"^[\x20-\x7e]+$"
    )]
    idempotency_key: Option<String>,
}

/// A record id in the path (`pol_...`, `lim_...`, `apr_...`, `inv_...`, `eff_...`); anything
/// else is 404.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct IdPath {
    /// The record's id.
    pub id: String,
}

/// An action by name or id.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ActionPath {
    /// The action's name or its id (`act_...`).
    pub reference: String,
}

/// A secret's name.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SecretPath {
    /// Upper-case letters, digits and `_`, at most 128 bytes; any other name is 400.
    #[param(pattern = "^[A-Z0-9_]+$", min_length = 1, max_length = 128)]
    pub name: String,
}

/// A policy and one of its versions.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // The handler reads the version as text: a bad one is the JSON 404.
pub struct PolicyVersionPath {
    /// The policy's id (`pol_...`).
    id: String,
    /// The version number, from 1.
    #[param(minimum = 0, maximum = 4294967295_u64)]
    version: u32,
}

/// A string query parameter whose values are the wire names of a set the core defines, so the
/// document lists exactly what the handler accepts.
fn string_enum(values: Vec<String>, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values))
        .description(Some(description))
        .into()
}

/// The wire names a derived property of an effect state takes, over every state.
fn effect_values<T: serde::Serialize>(property: impl Fn(EffectState) -> T) -> Vec<String> {
    let mut values: Vec<String> = Vec::new();
    for state in EffectState::ALL {
        if let Some(text) = serde_json::to_value(property(state))
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
        {
            if !values.contains(&text) {
                values.push(text);
            }
        }
    }
    values
}

macro_rules! enum_param {
    ($(#[$doc:meta])* $name:ident, $description:literal, $values:expr) => {
        $(#[$doc])*
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                string_enum($values, $description)
            }
        }

        impl ToSchema for $name {}
    };
}

enum_param!(
    /// `status` of an approval.
    ApprovalStatusParam,
    "only approvals in this status",
    ApprovalStatus::ALL.iter().map(|s| s.as_str().to_string()).collect()
);

enum_param!(
    /// `decisionOrigin` of an approval.
    DecisionOriginParam,
    "only approvals decided this way (`automated` is policy, system or assistant)",
    ["human", "policy", "system", "assistant", "automated"]
        .map(String::from)
        .to_vec()
);

enum_param!(
    /// `status` of an invocation.
    InvocationStatusParam,
    "only invocations in this status",
    InvocationStatus::ALL.iter().map(|s| s.as_str().to_string()).collect()
);

enum_param!(
    /// `outcome` of an effect.
    OutcomeParam,
    "only effects with this outcome",
    effect_values(EffectState::outcome)
);

enum_param!(
    /// `stage` of an effect.
    StageParam,
    "only effects at this stage",
    effect_values(EffectState::stage)
);

enum_param!(
    /// `grade` of an effect.
    GradeParam,
    "only effects with this grade",
    effect_values(Grade::of)
);

enum_param!(
    /// `status` of a run.
    RunStatusParam,
    "only runs in this status",
    steward_store::RunStatus::ALL.iter().map(|s| s.as_str().to_string()).collect()
);
