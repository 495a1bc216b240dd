//! Every error code the API can answer with, in one table: the code, its HTTP status and what it
//! means. Each [`super::ApiError`] is built from one of these constants (or, where an older call
//! site still passes a code as text, from a code this table lists: a debug assertion and the test
//! at the bottom of this file hold that), and the OpenAPI document lists the same table as the
//! `code` enum of the error envelope and as its `x-error-codes` extension
//! (`api/openapi/envelopes.rs`).

use axum::http::StatusCode;

/// One error code of the wire contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode {
    /// The stable code clients match on, as it appears in `error.code`.
    pub code: &'static str,
    /// The status it is answered with.
    pub status: StatusCode,
    /// What it means, for the document and for people reading the table.
    pub meaning: &'static str,
}

macro_rules! codes {
    ($($name:ident = ($code:literal, $status:ident, $meaning:literal);)+) => {
        $(
            #[doc = $meaning]
            pub const $name: ErrorCode = ErrorCode {
                code: $code,
                status: StatusCode::$status,
                meaning: $meaning,
            };
        )+
        /// Every code, in the order the document lists them.
        pub const CODES: &[ErrorCode] = &[$($name),+];
    };
}

codes! {
    VALIDATION_ERROR = ("VALIDATION_ERROR", BAD_REQUEST,
        "A field of the body, path or query is missing, malformed or unknown; `details.field` names it.");
    BAD_REQUEST = ("BAD_REQUEST", BAD_REQUEST,
        "The request could not be read at all (axum refused it before a handler ran; the status is the one it chose, a 4xx).");
    AUTHENTICATION_FAILED = ("AUTHENTICATION_FAILED", UNAUTHORIZED,
        "No API key, or one that is unknown, revoked or expired (or, on /metrics, the wrong metrics token).");
    FORBIDDEN = ("FORBIDDEN", FORBIDDEN,
        "The key lacks the operation's scope; `details.requiredScope` names it.");
    SELF_DECISION_FORBIDDEN = ("self_decision_forbidden", FORBIDDEN,
        "A key never decides an approval it requested.");
    OWN_EDIT_DECISION_FORBIDDEN = ("own_edit_decision_forbidden", FORBIDDEN,
        "A key that edited an approval's input never approves its own edit.");
    SELF_RESOLUTION_FORBIDDEN = ("self_resolution_forbidden", FORBIDDEN,
        "A key never resolves an invocation it made.");
    HOST_NOT_ALLOWED = ("host_not_allowed", FORBIDDEN,
        "MCP: the Host header is not one this server answers MCP requests for.");
    ORIGIN_NOT_ALLOWED = ("origin_not_allowed", FORBIDDEN,
        "MCP: the Origin is not this server; cross-site requests may not call tools.");
    INSUFFICIENT_SCOPE = ("insufficient_scope", FORBIDDEN,
        "MCP: the OAuth access token is valid but lacks a scope `/mcp` requires; `WWW-Authenticate` names them (`scope=`).");
    SUBJECT_NOT_MAPPED = ("subject_not_mapped", FORBIDDEN,
        "MCP: the OAuth access token is valid but the configuration maps its subject to no environment.");
    ISSUER_UNAVAILABLE = ("issuer_unavailable", SERVICE_UNAVAILABLE,
        "MCP: the OAuth issuer's signing keys could not be fetched, so the token could not be checked; nothing was done. Try again.");
    APPROVAL_EXPIRED = ("approval_expired", CONFLICT,
        "Console: the approval expired before this decision, which was not counted.");
    APPROVAL_ALREADY_DECIDED = ("approval_already_decided", CONFLICT,
        "Console: the approval was settled before this decision, which changed nothing.");
    ALREADY_DECIDED_BY_THIS_KEY = ("already_decided_by_this_key", CONFLICT,
        "Console: this key had already decided this approval; each key counts once.");
    APPROVAL_INPUT_CHANGED = ("approval_input_changed", CONFLICT,
        "The approval's input was edited after this decider read it; the approval was not counted.");
    APPROVAL_NOT_EDITABLE = ("approval_not_editable", CONFLICT,
        "The approval gates no invocation (a custom request): there is no input to edit.");
    NOT_FOUND = ("NOT_FOUND", NOT_FOUND,
        "No such record in the key's environment.");
    ROUTE_NOT_FOUND = ("ROUTE_NOT_FOUND", NOT_FOUND,
        "No endpoint serves this path (a wrong base URL or an older server); `details` has the method and path.");
    METHOD_NOT_ALLOWED = ("METHOD_NOT_ALLOWED", METHOD_NOT_ALLOWED,
        "The endpoint does not accept this method; `Allow` lists those it does.");
    REQUEST_TIMEOUT = ("REQUEST_TIMEOUT", REQUEST_TIMEOUT,
        "The request took too long to arrive.");
    PAYLOAD_TOO_LARGE = ("PAYLOAD_TOO_LARGE", PAYLOAD_TOO_LARGE,
        "The request body is larger than the server accepts; `details.limitBytes` says how large it may be.");
    UNSUPPORTED_MEDIA_TYPE = ("UNSUPPORTED_MEDIA_TYPE", UNSUPPORTED_MEDIA_TYPE,
        "The body is not of a content type the endpoint reads.");
    RATE_LIMIT_EXCEEDED = ("RATE_LIMIT_EXCEEDED", TOO_MANY_REQUESTS,
        "Too many at once: the key already holds the most event streams a key may (`STREAM_CONNECTIONS_PER_KEY_MAX`).");
    ANSWER_TOO_LARGE = ("ANSWER_TOO_LARGE", UNPROCESSABLE_ENTITY,
        "The answer would be larger than one answer may be (`ANSWER_BYTES_MAX`, 4 MiB); `details` has its size and the bound, and the message says where to read it page by page.");
    TOO_MANY_READS = ("TOO_MANY_READS", TOO_MANY_REQUESTS,
        "Too many at once: the key already runs the most heavy reads (runs, spans, invocation lists) a key may at once (`HEAVY_READS_PER_KEY_MAX`); `Retry-After` says when to ask again.");
    IDEMPOTENCY_KEY_REUSED = ("idempotency_key_reused", UNPROCESSABLE_ENTITY,
        "This Idempotency-Key was used for a different request.");
    IDEMPOTENCY_REQUEST_IN_PROGRESS = ("idempotency_request_in_progress", CONFLICT,
        "The original request with this Idempotency-Key is still running; call again with the same key for its result.");
    ALREADY_EXISTS = ("already_exists", CONFLICT,
        "A record with this name (or key) already exists.");
    CONCURRENT_MODIFICATION = ("concurrent_modification", CONFLICT,
        "Another request changed the record first; read it again.");
    DEAD_LETTER_SUBSCRIPTION_GONE = ("dead_letter_subscription_gone", CONFLICT,
        "A dead letter cannot be redelivered: its webhook subscription was deleted.");
    STALE_PLAN = ("STALE_PLAN", CONFLICT,
        "A policy file's apply: the file or the live policies changed since the plan; nothing was changed (`details.currentDigest` is the plan now).");
    ENVIRONMENT_HALTED = ("environment_halted", CONFLICT,
        "The environment is halted (the kill switch); nothing was invoked or sent.");
    OPERATION_HELD = ("operation_held", CONFLICT,
        "An operator's hold covers this action or operation key; nothing was sent. The invocation stays parked and runs once when the hold is released.");
    ACTION_DISABLED = ("action_disabled", CONFLICT,
        "The action is disabled.");
    OPERATION_KEY_REQUIRED = ("operation_key_required", BAD_REQUEST,
        "A governed invoke carried neither an operationKey nor an Idempotency-Key, and the environment's unkeyedInvokes is refuse; `details.field` is `operationKey`. Nothing was recorded.");
    OPERATION_KEY_CONFLICT = ("operation_key_conflict", CONFLICT,
        "The operationKey already names an effect with a different input; `details` names it.");
    RETRY_ALREADY_EXISTS = ("retry_already_exists", CONFLICT,
        "The failed invocation already has a retry with another input.");
    RETRY_OF_NOT_FAILED = ("retry_of_not_failed", CONFLICT,
        "retryOf names an invocation that is not settled failed.");
    DEPENDENCY_NOT_SATISFIED = ("dependency_not_satisfied", CONFLICT,
        "An effect named in dependsOn does not hold the outcome asked for (pending and unknown never do); `details.unmet` lists each with its outcome now. Nothing was recorded or sent.");
    COMPENSATION_TARGET_NOT_SETTLED = ("compensation_target_not_settled", CONFLICT,
        "compensates names an effect that has not settled (or was stopped before dispatch, so there is nothing to undo). Nothing was recorded or sent.");
    PREVIEW_EXPIRED = ("preview_expired", CONFLICT,
        "The preview named by previewId has expired; refresh it and bind the invoke to the new one. Nothing was recorded or sent.");
    PREVIEW_SUPERSEDED = ("preview_superseded", CONFLICT,
        "The preview was refreshed; an invoke (and any approval) must bind to the new one. `details.supersededBy` names it.");
    PREVIEW_ALREADY_USED = ("preview_already_used", CONFLICT,
        "The preview is already bound to an invocation; a preview binds one call. `details.effectId` names it.");
    PREVIEW_ACTION_CHANGED = ("preview_action_changed", CONFLICT,
        "The action has a new version since the preview; refresh it. Nothing was recorded or sent.");
    PREVIEW_MISMATCH = ("preview_mismatch", CONFLICT,
        "The invoke does not match its preview: another input, another rendered request, or an operationKey bound elsewhere; `details.field` says which.");
    PREVIEW_OTHER_KEY = ("preview_other_key", FORBIDDEN,
        "The preview was asked for by another key: a preview binds an invoke (and is refreshed) only by the key that asked for it. Nothing was recorded or sent.");
    PREVIEW_BLOCKED = ("preview_blocked", CONFLICT,
        "The request would not be sent (a secret, a host, the destination); `details.reason` names it. Nothing was recorded.");
    FEATURE_NOT_AVAILABLE = ("FEATURE_NOT_AVAILABLE", PAYMENT_REQUIRED,
        "A hosted-product feature Steward does not offer (billing plans, invoices, usage history, cost estimates, payment configuration); nothing was read or changed.");
    BUDGET_EXCEEDED = ("BUDGET_EXCEEDED", TOO_MANY_REQUESTS,
        "The calling key's budget has no room this month; no invocation was recorded and nothing was sent (`details` has the cap and the usage).");
    BUDGET_RECONCILIATION_REQUIRED = ("BUDGET_RECONCILIATION_REQUIRED", SERVICE_UNAVAILABLE,
        "The calling key's budget has room only if some unknown effects did not happen: reconcile them first; nothing was recorded or sent.");
    CONNECTION_KEY_REJECTED = ("CONNECTION_KEY_REJECTED", UNPROCESSABLE_ENTITY,
        "The provider refused the API key; nothing was stored (`details.integrationId` names the integration).");
    CONNECTION_KEY_CHECK_FAILED = ("CONNECTION_KEY_CHECK_FAILED", BAD_GATEWAY,
        "The API key could not be checked with the provider (unreachable, timed out, or an unexpected answer); nothing was stored or changed.");
    CONNECTION_SESSION_INVALID = ("CONNECTION_SESSION_INVALID", BAD_REQUEST,
        "The sign-in callback's `state` names no consent session waiting for one: unknown, already used, or expired; nothing was stored.");
    CONNECTION_SESSION_FAILED = ("CONNECTION_SESSION_FAILED", UNPROCESSABLE_ENTITY,
        "The consent session failed (the person refused, or the provider refused the code); `details.reason` says which; nothing was stored.");
    CONNECTION_SESSION_EXPIRED = ("CONNECTION_SESSION_EXPIRED", UNPROCESSABLE_ENTITY,
        "The consent session was not completed within its 15 minutes; nothing was stored.");
    EFFECT_NOT_UNKNOWN = ("effect_not_unknown", CONFLICT,
        "Only an unknown effect is resolved by hand or replayed; this one is not (or was settled first by someone else).");
    REPLAY_NOT_SUPPORTED = ("replay_not_supported", CONFLICT,
        "The action has no provider idempotency, so a replay could write twice; reconcile or resolve it instead.");
    REPLAY_WINDOW_CLOSED = ("replay_window_closed", CONFLICT,
        "The adapter's provider idempotency window has closed (or closes within the safety margin), so a replay could write twice.");
    REPLAY_BLOCKED = ("replay_blocked", CONFLICT,
        "The replay was refused before sending (a secret, a host or the destination; `details.reason` names it); the effect stays unknown.");
    RUN_ALREADY_ENDED = ("run_already_ended", CONFLICT,
        "The run has ended; its status and what it ended with are final.");
    RUN_SPANS_LIMIT_REACHED = ("run_spans_limit_reached", CONFLICT,
        "Ingesting these spans would take the run past its span limit; nothing was stored (`details.spansMax`).");
    INTERNAL_ERROR = ("INTERNAL_ERROR", INTERNAL_SERVER_ERROR,
        "A bug or a corrupt record; the detail is logged with its ids, never sent. Also what an illegal state transition becomes.");
    OUTCOME_UNKNOWN = ("outcome_unknown", SERVICE_UNAVAILABLE,
        "The call may have reached the provider (or the database may hold it) but its outcome could not be recorded; it is being settled. Call again with the same operationKey and Idempotency-Key, never new ones (`details.mayHaveBeenSent`).");
    STORAGE_UNAVAILABLE = ("STORAGE_UNAVAILABLE", SERVICE_UNAVAILABLE,
        "Storage is unavailable; this request changed nothing and sent nothing. Retry with the same keys.");
    SIMULATED_CRASH = ("SIMULATED_CRASH", SERVICE_UNAVAILABLE,
        "In-process simulations only: the dispatch stopped at a crash point, as a process death would.");
}

/// The table's entry for `code`.
pub fn find(code: &str) -> Option<&'static ErrorCode> {
    CODES.iter().find(|c| c.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    #[test]
    fn every_code_is_listed_once_with_an_error_status() {
        let mut seen = BTreeSet::new();
        for c in CODES {
            assert!(seen.insert(c.code), "{} is listed twice", c.code);
            assert!(
                c.status.is_client_error() || c.status.is_server_error(),
                "{} has status {}",
                c.code,
                c.status
            );
            assert!(c.meaning.ends_with('.'), "{}: say what it means", c.code);
        }
    }

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The top-level string literals among the arguments of the call whose `(` is at `open`.
    fn literal_arguments(text: &str, open: usize) -> Vec<String> {
        let bytes = text.as_bytes();
        let (mut depth, mut i, mut found) = (0usize, open, Vec::new());
        while i < bytes.len() {
            match bytes[i] {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                b'"' => {
                    let start = i + 1;
                    i += 1;
                    while i < bytes.len() && bytes[i] != b'"' {
                        if bytes[i] == b'\\' {
                            i += 1;
                        }
                        i += 1;
                    }
                    if depth == 1 {
                        found.push(text[start..i].to_string());
                    }
                }
                _ => {}
            }
            i += 1;
        }
        found
    }

    /// A literal that reads like a code (one word of letters and underscores), not a message.
    fn code_shaped(text: &str) -> bool {
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
    }

    /// Every code the server source passes as text to an `ApiError` constructor (or to the MCP
    /// door's `forbidden`) is in the table: a code cannot be answered without being listed.
    #[test]
    fn every_code_the_source_mints_is_in_the_table() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&root, &mut files);
        let calls = ["ApiError::new(", "ApiError::conflict(", "forbidden("];
        let mut minted = BTreeSet::new();
        // This file names the calls in text; it mints nothing.
        for file in files.iter().filter(|f| !f.ends_with("error/codes.rs")) {
            let text = std::fs::read_to_string(file).unwrap();
            for call in calls {
                for (at, _) in text.match_indices(call) {
                    let open = at + call.len() - 1;
                    for literal in literal_arguments(&text, open) {
                        if code_shaped(&literal) {
                            minted.insert((literal, file.display().to_string()));
                        }
                    }
                }
            }
        }
        assert!(
            minted.iter().any(|(c, _)| c == "METHOD_NOT_ALLOWED"),
            "the scan finds the codes passed as text: {minted:?}"
        );
        let unlisted: Vec<_> = minted.iter().filter(|(c, _)| find(c).is_none()).collect();
        assert!(unlisted.is_empty(), "codes not in CODES: {unlisted:?}");
    }

    /// docs/ERRORS.md describes every code of the table under a `### `code`` heading whose first
    /// line gives the code's HTTP status, and describes no code the table lacks: a code cannot
    /// be added, dropped or moved to another status without its reference page following.
    #[test]
    fn errors_md_describes_every_code_with_its_status() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ERRORS.md");
        let text = std::fs::read_to_string(&path).expect("docs/ERRORS.md is readable");
        let lines: Vec<&str> = text.lines().collect();
        let mut described = std::collections::BTreeMap::new();
        for (at, line) in lines.iter().enumerate() {
            let Some(code) = line.strip_prefix("### `").and_then(|l| l.strip_suffix('`')) else {
                continue;
            };
            assert!(
                find(code).is_some(),
                "docs/ERRORS.md describes `{code}`, which is not in CODES"
            );
            let first = lines[at + 1..]
                .iter()
                .find(|l| !l.trim().is_empty())
                .copied()
                .unwrap_or_default();
            assert!(
                described.insert(code, first).is_none(),
                "docs/ERRORS.md describes `{code}` twice"
            );
        }
        for c in CODES {
            let first = described
                .get(c.code)
                .unwrap_or_else(|| panic!("docs/ERRORS.md has no `### `{}`` section", c.code));
            let status = format!("HTTP {}", c.status.as_u16());
            assert!(
                first.contains(&status),
                "docs/ERRORS.md: `{}` should open with its status {status}: {first}",
                c.code
            );
        }
    }
}
