//! What an operator's call can end in, short of an answer, worded for the person at the terminal:
//! the server's own refusal (its code and message), or why the server could not be asked (the
//! URL, the cause, and how to point the command elsewhere).
//!
//! No variant has a `source`: the `steward` binary prints an error with its whole chain, and each
//! message here already says everything once.

use super::{OPERATOR_REQUEST_TIMEOUT_S, SERVER_DEFAULT};
use serde_json::Value;

/// Why an operator's call has no answer to show.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// Nothing came back: refused, timed out, a TLS failure, ...
    #[error(
        "the Steward server at {server} {why}; start it with `steward serve`, or point --server \
         or STEWARD_SERVER at it (the default is {SERVER_DEFAULT})"
    )]
    Unreachable { server: String, why: Unreachable },
    /// Something answered, but not with JSON.
    #[error(
        "{server} answered HTTP {status} with something that is not JSON ({cause}): is it a \
         Steward server? Point --server or STEWARD_SERVER at one"
    )]
    NotJson {
        server: String,
        status: u16,
        cause: String,
    },
    /// Something answered JSON, but not Steward's envelope.
    #[error(
        "{server} answered HTTP {status} without Steward's envelope: is it a Steward server? \
         Point --server or STEWARD_SERVER at one"
    )]
    NotSteward { server: String, status: u16 },
    /// Steward refused the request: its envelope's code and message.
    #[error("{message} ({code}, HTTP {status})")]
    Refused {
        status: u16,
        code: String,
        message: String,
        /// The envelope's `details` (`null` when it has none).
        details: Value,
    },
    /// Steward answered, but its `data` is not the view this client reads: a server of another
    /// version.
    #[error(
        "{server} answered {what} in a shape this steward does not read ({cause}): are the \
         server and this binary the same version?"
    )]
    Unexpected {
        server: String,
        what: &'static str,
        cause: String,
    },
    /// The client could not be built (TLS backend, ...).
    #[error("cannot make an HTTP client: {0}")]
    Client(String),
}

/// Why a server could not be asked anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreachable {
    /// No answer within [`OPERATOR_REQUEST_TIMEOUT_S`].
    TimedOut,
    /// The TLS handshake failed (an `https` URL to a plain server, an untrusted certificate).
    Tls(String),
    /// No connection (refused, no route, a name that does not resolve).
    Connect(String),
    /// Anything else on the way.
    Other(String),
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreachable::TimedOut => {
                write!(f, "did not answer within {OPERATOR_REQUEST_TIMEOUT_S} s")
            }
            Unreachable::Tls(cause) => write!(f, "failed the TLS handshake ({cause})"),
            Unreachable::Connect(cause) => write!(f, "could not be reached ({cause})"),
            Unreachable::Other(cause) => write!(f, "could not be asked ({cause})"),
        }
    }
}

impl Unreachable {
    /// Classifies a transport error by its kind and its innermost cause.
    pub(crate) fn of(error: &reqwest::Error) -> Unreachable {
        let mut causes = Vec::new();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            causes.push(cause.to_string());
            source = cause.source();
        }
        let tls = causes.iter().any(|c| {
            let c = c.to_ascii_lowercase();
            c.contains("tls") || c.contains("certificate") || c.contains("handshake")
        });
        Unreachable::classify(
            error.is_timeout(),
            tls,
            error.is_connect(),
            causes.last().cloned().unwrap_or_else(|| error.to_string()),
        )
    }

    fn classify(timeout: bool, tls: bool, connect: bool, cause: String) -> Unreachable {
        match (timeout, tls, connect) {
            (true, _, _) => Unreachable::TimedOut,
            (false, true, _) => Unreachable::Tls(cause),
            (false, false, true) => Unreachable::Connect(cause),
            (false, false, false) => Unreachable::Other(cause),
        }
    }
}

impl OperatorError {
    /// The error code when Steward refused the request.
    pub fn code(&self) -> Option<&str> {
        match self {
            OperatorError::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_not_reached_is_named_with_the_cause_and_the_way_to_point_elsewhere() {
        let error = OperatorError::Unreachable {
            server: "http://127.0.0.1:9/".into(),
            why: Unreachable::classify(false, false, true, "Connection refused".into()),
        };
        let text = error.to_string();
        for needle in [
            "http://127.0.0.1:9/",
            "could not be reached (Connection refused)",
            "--server",
            "STEWARD_SERVER",
            SERVER_DEFAULT,
        ] {
            assert!(text.contains(needle), "no {needle:?} in {text}");
        }
    }

    #[test]
    fn a_timeout_wins_over_tls_and_tls_over_a_connect_failure() {
        assert_eq!(
            Unreachable::classify(true, true, true, "x".into()),
            Unreachable::TimedOut
        );
        assert_eq!(
            Unreachable::classify(false, true, true, "x".into()),
            Unreachable::Tls("x".into())
        );
        assert_eq!(
            Unreachable::classify(false, false, false, "x".into()).to_string(),
            "could not be asked (x)"
        );
        assert_eq!(
            Unreachable::TimedOut.to_string(),
            format!("did not answer within {OPERATOR_REQUEST_TIMEOUT_S} s")
        );
    }

    #[test]
    fn a_refusal_reads_as_the_server_said_it_with_its_code_and_status() {
        let error = OperatorError::Refused {
            status: 403,
            code: "FORBIDDEN".into(),
            message: "the requester cannot decide".into(),
            details: Value::Null,
        };
        assert_eq!(
            error.to_string(),
            "the requester cannot decide (FORBIDDEN, HTTP 403)"
        );
        assert_eq!(error.code(), Some("FORBIDDEN"));
    }
}
