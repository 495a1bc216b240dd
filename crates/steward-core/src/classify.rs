//! Honest outcome classification: what one provider attempt tells us about the world.
//!
//! `failed` only when the request provably never left Steward or the provider definitively
//! rejected it. Everything ambiguous is `unknown`, and unknown is never a reason to send again.

use crate::effect::EffectEvent;

/// What the transport reported for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptReport {
    /// No connection was ever established (refused, unreachable, DNS): no byte was sent.
    NotConnected { reason: String },
    /// The request could not be built (a header value or URL HTTP cannot carry): it never
    /// reached a connection, so no byte was sent.
    NotBuilt { reason: String },
    /// The deadline passed after the request may have been sent.
    TimedOut,
    /// The connection broke after the request may have been sent (reset, EOF, broken body).
    BrokenAfterSend { reason: String },
    /// The provider answered with an HTTP status.
    Answered {
        status: u16,
        /// The provider said explicitly that nothing happened and a retry is safe
        /// (Stripe's `Stripe-Should-Retry: true`).
        provider_says_nothing_happened: bool,
        /// For a 2xx: the provider's own record proves the write (e.g. a refund object with
        /// status `succeeded`).
        provider_record_confirms: bool,
    },
}

/// The classification, with a human reason for the evidence log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub event: EffectEvent,
    pub reason: String,
}

pub fn classify(report: &AttemptReport) -> Classified {
    let (event, reason) = match report {
        AttemptReport::NotConnected { reason } => (
            EffectEvent::NotSent,
            format!("never sent: no connection to the provider ({reason})"),
        ),
        AttemptReport::NotBuilt { reason } => (
            EffectEvent::NotSent,
            format!("never sent: the request could not be built ({reason})"),
        ),
        AttemptReport::TimedOut => (
            EffectEvent::Ambiguous,
            "no answer before the dispatch deadline; the provider may have acted".to_string(),
        ),
        AttemptReport::BrokenAfterSend { reason } => (
            EffectEvent::Ambiguous,
            format!("connection broke after the request may have been sent ({reason})"),
        ),
        AttemptReport::Answered {
            status,
            provider_says_nothing_happened,
            provider_record_confirms,
        } => classify_status(
            *status,
            *provider_says_nothing_happened,
            *provider_record_confirms,
        ),
    };
    Classified { event, reason }
}

fn classify_status(status: u16, nothing_happened: bool, confirms: bool) -> (EffectEvent, String) {
    match status {
        200..=299 => (
            EffectEvent::ProviderAccepted {
                confirmed: confirms,
            },
            format!("provider answered {status}"),
        ),
        // 408 (timeout) and 409 (a concurrent request under the same provider key is still
        // running) say nothing about whether the write happened.
        408 | 409 => (
            EffectEvent::Ambiguous,
            format!("provider answered {status}; outcome not known"),
        ),
        400..=499 => (
            EffectEvent::ProviderRejected,
            format!("provider rejected the request with {status}"),
        ),
        _ if nothing_happened => (
            EffectEvent::ProviderRejected,
            format!("provider answered {status} and said nothing happened"),
        ),
        _ => (
            EffectEvent::Ambiguous,
            format!("provider answered {status}; it may have acted before failing"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16, nothing: bool, confirms: bool) -> EffectEvent {
        classify(&AttemptReport::Answered {
            status,
            provider_says_nothing_happened: nothing,
            provider_record_confirms: confirms,
        })
        .event
    }

    #[test]
    fn failed_only_when_provably_not_done() {
        assert_eq!(
            classify(&AttemptReport::NotConnected {
                reason: "refused".into()
            })
            .event,
            EffectEvent::NotSent
        );
        assert_eq!(
            classify(&AttemptReport::NotBuilt {
                reason: "bad header".into()
            })
            .event,
            EffectEvent::NotSent
        );
        assert_eq!(answered(402, false, false), EffectEvent::ProviderRejected);
        assert_eq!(answered(500, true, false), EffectEvent::ProviderRejected);
    }

    #[test]
    fn ambiguity_is_unknown() {
        assert_eq!(
            classify(&AttemptReport::TimedOut).event,
            EffectEvent::Ambiguous
        );
        assert_eq!(
            classify(&AttemptReport::BrokenAfterSend {
                reason: "reset".into()
            })
            .event,
            EffectEvent::Ambiguous
        );
        for status in [500, 502, 503, 504, 408, 409] {
            assert_eq!(
                answered(status, false, false),
                EffectEvent::Ambiguous,
                "{status}"
            );
        }
    }

    #[test]
    fn success_is_confirmed_only_by_the_providers_record() {
        assert_eq!(
            answered(200, false, true),
            EffectEvent::ProviderAccepted { confirmed: true }
        );
        assert_eq!(
            answered(201, false, false),
            EffectEvent::ProviderAccepted { confirmed: false }
        );
    }
}
