//! What an evidence entry says happened, and who said it: the closed vocabulary of an effect's
//! append-only evidence. The wire and the database carry each as its snake_case name
//! ([`EvidenceKind::as_str`]); a name that is not in the list is refused when read back, so a
//! typo cannot enter the record.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The name on the wire and in the database.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value named `text`, if there is one.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

vocabulary! {
    /// What happened.
    EvidenceKind {
        /// The invocation was accepted and recorded (by Steward, or allowed by a policy).
        Accepted => "accepted",
        /// A policy denied the invocation; it never runs.
        Denied => "denied",
        /// An approval decided the parked invocation (approved, denied, expired, cancelled).
        Approval => "approval",
        /// The environment was halted: the invocation waits, nothing was sent.
        Parked => "parked",
        /// An impact limit had no room: nothing was sent.
        Refused => "refused",
        /// The request could not be sent safely (a secret's destination, the URL, the body).
        Blocked => "blocked",
        /// An attempt was recorded; its request may leave after this.
        Attempt => "attempt",
        /// The provider answered an attempt.
        Response => "response",
        /// An attempt ended without an answer (a timeout, a reset, a refused connection).
        Transport => "transport",
        /// An answer that arrived after the attempt's deadline had already made it unknown.
        LateAnswer => "late_answer",
        /// A replay under the same provider identity, or why it was not sent.
        Replay => "replay",
        /// A read-only reconcile: what the provider's records say.
        Reconcile => "reconcile",
        /// Steward stopped while the effect was in flight; recovery settled it.
        Restart => "restart",
        /// A person settled an unknown effect, with a reason.
        ManualResolution => "manual_resolution",
        /// A note that changes nothing.
        Note => "note",
    }
}

vocabulary! {
    /// Who said it.
    EvidenceSource {
        /// Steward itself (the write path, recovery).
        Steward => "steward",
        /// An approval policy.
        Policy => "policy",
        /// An approval's decision.
        Approval => "approval",
        /// The provider, through its answer or the lack of one.
        Provider => "provider",
        /// A person, through the API or the console.
        Manual => "manual",
        /// An operator note recorded outside the API (tests and tools).
        Operator => "operator",
        /// A reconcile asked for through the API.
        Api => "api",
        /// The background reconciler.
        Reconciler => "reconciler",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_and_source_reads_back_from_its_name() {
        for kind in EvidenceKind::ALL {
            assert_eq!(EvidenceKind::parse(kind.as_str()), Some(*kind));
            let wire = serde_json::to_value(kind).unwrap();
            assert_eq!(wire, kind.as_str());
        }
        for source in EvidenceSource::ALL {
            assert_eq!(EvidenceSource::parse(source.as_str()), Some(*source));
            let wire = serde_json::to_value(source).unwrap();
            assert_eq!(wire, source.as_str());
        }
    }

    #[test]
    fn a_name_outside_the_vocabulary_is_refused() {
        assert_eq!(EvidenceKind::parse("x"), None);
        assert_eq!(EvidenceKind::parse("Attempt"), None);
        assert_eq!(EvidenceSource::parse("stripe"), None);
    }
}
