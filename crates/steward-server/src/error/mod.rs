//! The one mapping from domain and storage errors to HTTP answers. Internal detail is logged with
//! its source chain and never sent to the client. Every code an answer carries is one of
//! [`codes::CODES`].

pub mod codes;
pub(crate) mod envelope;

pub use envelope::{ErrorBody, ErrorEnvelope};

use crate::effect_error::EffectError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use codes::ErrorCode;
use serde_json::{json, Value};
use steward_store::StoreError;

/// An error answer: status, stable code, human message, optional structured details.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    /// An answer with `code`, at the status the table gives it.
    pub fn of(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status: code.status,
            code: code.code,
            message: message.into(),
            details: None,
        }
    }

    /// An answer with a code given as text, for call sites that pick the status themselves.
    /// The code must be one of [`codes::CODES`] (checked in debug builds, and in the source by
    /// the table's test).
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        debug_assert!(
            codes::find(code).is_some(),
            "error code {code} is not in CODES"
        );
        Self {
            status,
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 400 naming the offending field.
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        let field = field.into();
        let message = format!("{field}: {}", message.into());
        Self::of(codes::VALIDATION_ERROR, message).with_details(json!({ "field": field }))
    }

    pub fn not_found(what: &str) -> Self {
        Self::of(codes::NOT_FOUND, format!("{what} not found"))
    }

    pub fn unauthenticated() -> Self {
        Self::of(codes::AUTHENTICATION_FAILED, "missing or invalid API key")
    }

    pub fn forbidden(scope: &str) -> Self {
        Self::of(
            codes::FORBIDDEN,
            format!("this key lacks the `{scope}` scope"),
        )
        .with_details(json!({ "requiredScope": scope }))
    }

    /// A 409 with a code given as text; see [`ApiError::new`].
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// A 500: `err` and its source chain are logged under `context`, the client hears only
    /// "internal error".
    pub fn internal(context: &str, err: &dyn std::error::Error) -> Self {
        tracing::error!(error = %err, source = ?err.source(), "{context}");
        Self::of(codes::INTERNAL_ERROR, "internal error")
    }

    /// The answer's body, as sent.
    pub fn envelope(&self) -> ErrorEnvelope {
        ErrorEnvelope {
            success: false,
            error: ErrorBody {
                code: self.code.to_string(),
                message: self.message.clone(),
                details: self.details.clone(),
            },
        }
    }

    /// The answer's body as JSON (what an idempotent request records for its replay).
    pub fn body(&self) -> Value {
        serde_json::to_value(self.envelope()).expect("an error envelope is plain JSON")
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match &err {
            StoreError::Unavailable { .. } => {
                tracing::error!(error = %err, source = ?std::error::Error::source(&err), "storage unavailable");
                ApiError::of(
                    codes::STORAGE_UNAVAILABLE,
                    "storage is unavailable; this request changed nothing and sent nothing \
                     (retry with the same keys)",
                )
            }
            StoreError::CommitUnknown { .. } => {
                tracing::error!(error = %err, source = ?std::error::Error::source(&err), "the database lost its answer to a commit");
                ApiError::of(
                    codes::OUTCOME_UNKNOWN,
                    "the database lost its answer to this request's commit: the change may or \
                     may not be recorded (nothing was sent to a provider because of it); call \
                     again with the same keys, never new ones, to see what was recorded",
                )
                .with_details(json!({"mayHaveBeenSent": false}))
            }
            StoreError::NotFound { what } => ApiError::not_found(what),
            StoreError::Duplicate { what } if *what == steward_store::PREVIEW_BINDING => ApiError::of(
                codes::PREVIEW_ALREADY_USED,
                "this preview was bound to another invocation first; preview again for another call",
            ),
            StoreError::Duplicate { what } => {
                ApiError::of(codes::ALREADY_EXISTS, format!("{what} already exists"))
            }
            // A fenced write: another replica took the work over first.
            StoreError::VersionConflict { .. }
            | StoreError::StateConflict { .. }
            | StoreError::Fenced { .. } => ApiError::of(
                codes::CONCURRENT_MODIFICATION,
                "another request changed this record first; read it again",
            ),
            StoreError::Halted => ApiError::of(
                codes::ENVIRONMENT_HALTED,
                "this environment is halted; nothing was sent",
            ),
            StoreError::Held => ApiError::of(
                codes::OPERATION_HELD,
                "an operator's hold covers this operation; nothing was sent",
            ),
            StoreError::Corrupt(_) => ApiError::internal("corrupt record", &err),
            StoreError::IllegalTransition { .. } => ApiError::internal("illegal transition", &err),
        }
    }
}

/// The edge for everything that drives an effect: the only place its errors become answers.
impl From<EffectError> for ApiError {
    fn from(err: EffectError) -> Self {
        match err {
            EffectError::Store { source } => source.into(),
            EffectError::AnswerNotRecorded { effect, source } => {
                tracing::error!(effect = %effect, error = %source, "the answer of a provider call could not be recorded; it is kept to be recorded");
                ApiError::of(
                    codes::OUTCOME_UNKNOWN,
                    "the call may have reached the provider, but its answer could not be \
                     recorded (storage failed); its outcome is being settled. Call again with \
                     the same operationKey and Idempotency-Key, never new ones: nothing is \
                     sent twice, and the answer then shows the outcome",
                )
                .with_details(json!({"effectId": effect, "mayHaveBeenSent": true}))
            }
            EffectError::IntentNotKnown { source } => {
                tracing::error!(error = %source, "the commit of an invoke's intent and attempt lost its answer; nothing was sent");
                ApiError::of(
                    codes::OUTCOME_UNKNOWN,
                    "the database lost its answer to the commit recording this invoke, so \
                     whether it is recorded is not known; nothing was sent to the provider, and \
                     if it was recorded it is settled failed as not sent. Call again with the \
                     same operationKey and Idempotency-Key, never new ones, to see what was \
                     recorded",
                )
                .with_details(json!({"mayHaveBeenSent": false}))
            }
            EffectError::ParkedNotKnown { source } => {
                tracing::error!(error = %source, "the commit of a parked invocation lost its answer; nothing was sent");
                ApiError::of(
                    codes::OUTCOME_UNKNOWN,
                    "the database lost its answer to the commit recording this invocation, so \
                     whether it is recorded is not known; nothing was sent to the provider, but \
                     if it was recorded it waits for its approval and is sent once approved. \
                     Call again with the same operationKey and Idempotency-Key, never new ones, \
                     to see what was recorded",
                )
                .with_details(json!({"mayHaveBeenSent": false}))
            }
            EffectError::Missing { what, .. } => ApiError::not_found(what),
            EffectError::ReplayBlocked { code, message, .. } => ApiError::of(
                codes::REPLAY_BLOCKED,
                format!("the replay was not sent: {message}"),
            )
            .with_details(json!({ "reason": code })),
            EffectError::SimulatedCrash { point } => ApiError::of(
                codes::SIMULATED_CRASH,
                format!("simulated crash at {}", point.name()),
            ),
        }
    }
}

/// How long a caller should wait before resending a request whose original is still running
/// (`idempotency_request_in_progress`), in seconds: the `Retry-After` of that 409. One second is
/// a fraction of the dispatch deadline, so a resend soon finds the recorded answer.
pub const IN_PROGRESS_RETRY_AFTER_S: u32 = 1;

/// How long a refused heavy read (`api/bounded.rs`) should wait before asking again, in
/// seconds: a heavy read under its bounds takes well under a second.
pub const HEAVY_READ_RETRY_AFTER_S: u32 = 1;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = if self.code == codes::IDEMPOTENCY_REQUEST_IN_PROGRESS.code
            || self.code == codes::OUTCOME_UNKNOWN.code
        {
            Some(IN_PROGRESS_RETRY_AFTER_S.to_string())
        } else if self.code == codes::TOO_MANY_READS.code {
            Some(HEAVY_READ_RETRY_AFTER_S.to_string())
        } else {
            None
        };
        let mut response = (self.status, axum::Json(self.envelope())).into_response();
        if let Some(seconds) = retry_after.and_then(|s| s.parse().ok()) {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds);
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::{EffectId, EffectState, EnvironmentId};

    /// An illegal transition is Steward's bug: a 500 whose body names neither id, never a 409.
    #[test]
    fn an_illegal_transition_is_an_internal_error_never_a_conflict() {
        let env = EnvironmentId::from_unique(&crate::clock::unique());
        let effect = EffectId::from_unique(&crate::clock::unique());
        let err = EffectError::from(StoreError::IllegalTransition {
            env: env.clone(),
            effect: effect.clone(),
            from: EffectState::Failed,
            step: "the event Replay".into(),
        });
        assert!(err.to_string().contains(effect.as_str()), "{err}");
        assert!(err.to_string().contains(env.as_str()), "{err}");
        let answer = ApiError::from(err);
        assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(answer.code, codes::INTERNAL_ERROR.code);
        let body = answer.body().to_string();
        assert!(!body.contains(effect.as_str()), "{body}");
        assert!(!body.contains("illegal"), "{body}");
    }

    #[test]
    fn every_effect_error_answers_with_a_listed_code() {
        let effect = EffectId::from_unique(&crate::clock::unique());
        let errors = [
            EffectError::missing("effect", &effect),
            EffectError::ReplayBlocked {
                effect: effect.clone(),
                code: "secret_missing",
                message: "secret K does not exist".into(),
            },
            EffectError::SimulatedCrash {
                point: steward_core::CrashPoint::ServerAfterSend,
            },
            StoreError::Halted.into(),
            StoreError::Held.into(),
        ];
        for err in errors {
            let answer = ApiError::from(err);
            let listed = codes::find(answer.code).expect("a listed code");
            assert_eq!(listed.status, answer.status, "{}", answer.code);
        }
    }
}
