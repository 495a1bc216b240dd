//! The checks: what the event log and the final state (the provider's writes, the store's
//! records, the audit chain) must agree on after every fault has healed and recovery has had
//! its time. A pure function of its inputs, so the unit tests below feed it synthetic logs.
//!
//! What each check means (docs/DECISIONS.md, "The fault suite"):
//! * **duplicate**: more than one provider write for one operation key (counted at the fixture
//!   by the operation's payment intent, never from HTTP answers);
//! * **lost**: an operation whose invoke was acknowledged (an invocation came back) that the
//!   store does not hold after recovery;
//! * **no outcome**: an acknowledged operation still `running` or pending approval after
//!   recovery;
//! * **success without a write** / **failure with a write**: a final status the provider
//!   contradicts;
//! * **not sent but written**: an operation whose first answer said nothing was sent
//!   (`STORAGE_UNAVAILABLE`; the agent believed it and gave the key up) with a provider write;
//! * **split**: one operation key answered with two different invocations;
//! * **approval decided twice**; **left dispatching** (an effect still `dispatching`);
//! * **reservations**: the impact limit's consumed, reserved and unknown figures against the sum
//!   of the effects' amounts by outcome;
//! * **audit**: `steward audit verify` failed;
//! * **refused**: an invoke refused outright (4xx), which no fault should cause;
//! * **no recovery**: a primary death after which no invoke was ever acknowledged.

use super::events::{Answer, Event, Stamped};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

/// One business operation the clients drove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Operation {
    /// The operation key (stable across every retry).
    pub(crate) key: String,
    /// What the provider's writes are counted by.
    pub(crate) payment_intent: String,
    /// The refund's amount, in cents: what the impact limit counts.
    pub(crate) amount: i64,
}

/// An invocation as the store holds it after recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredInvocation {
    pub(crate) status: String,
}

/// An effect as the store holds it after recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredEffect {
    pub(crate) id: String,
    pub(crate) operation_key: Option<String>,
    pub(crate) outcome: String,
    pub(crate) stage: String,
}

/// The impact limit's figures for its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LimitUsage {
    pub(crate) consumed: i64,
    pub(crate) reserved: i64,
    pub(crate) unknown_exposure: i64,
}

/// Everything read after recovery.
#[derive(Debug, Clone, Default)]
pub(crate) struct FinalState {
    /// Provider writes per payment intent (the fixture's count).
    pub(crate) writes: HashMap<String, usize>,
    /// Every acknowledged invocation id looked up; absent from the map: the store has none.
    pub(crate) invocations: HashMap<String, StoredInvocation>,
    /// Every effect of the environment.
    pub(crate) effects: Vec<StoredEffect>,
    /// Decisions recorded per approval id.
    pub(crate) approval_decisions: HashMap<String, usize>,
    pub(crate) limit: Option<LimitUsage>,
    /// `steward audit verify`'s output when it failed; `None` when it passed.
    pub(crate) audit_failure: Option<String>,
}

/// One broken promise. The first found is what the last line names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Violation {
    Duplicate {
        operation: String,
        writes: usize,
    },
    Lost {
        operation: String,
        invocation: String,
    },
    NoOutcome {
        operation: String,
        status: String,
    },
    SucceededWithoutWrite {
        operation: String,
    },
    FailedWithWrite {
        operation: String,
        status: String,
    },
    NotSentButWritten {
        operation: String,
        code: String,
    },
    Split {
        operation: String,
        invocations: Vec<String>,
    },
    ApprovalDecidedTwice {
        approval: String,
        decisions: usize,
    },
    LeftDispatching {
        effect: String,
    },
    Reservations {
        what: String,
    },
    Audit {
        output: String,
    },
    Refused {
        operation: String,
        code: String,
    },
    NoRecovery {
        death_at: Duration,
    },
}

impl Violation {
    /// The violation's name, as the last line and the tests say it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Violation::Duplicate { .. } => "duplicate",
            Violation::Lost { .. } => "lost",
            Violation::NoOutcome { .. } => "no outcome",
            Violation::SucceededWithoutWrite { .. } => "success without a write",
            Violation::FailedWithWrite { .. } => "failure with a write",
            Violation::NotSentButWritten { .. } => "not sent but written",
            Violation::Split { .. } => "split",
            Violation::ApprovalDecidedTwice { .. } => "approval decided twice",
            Violation::LeftDispatching { .. } => "left dispatching",
            Violation::Reservations { .. } => "reservations",
            Violation::Audit { .. } => "audit",
            Violation::Refused { .. } => "refused",
            Violation::NoRecovery { .. } => "no recovery",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.name())?;
        match self {
            Violation::Duplicate { operation, writes } => {
                write!(f, "operation {operation} has {writes} provider writes")
            }
            Violation::Lost {
                operation,
                invocation,
            } => write!(
                f,
                "operation {operation} was acknowledged as {invocation}, which the store does not hold"
            ),
            Violation::NoOutcome { operation, status } => write!(
                f,
                "operation {operation} is still {status} after recovery"
            ),
            Violation::SucceededWithoutWrite { operation } => write!(
                f,
                "operation {operation} succeeded but the provider has no write"
            ),
            Violation::FailedWithWrite { operation, status } => write!(
                f,
                "operation {operation} ended {status} but the provider has its write"
            ),
            Violation::NotSentButWritten { operation, code } => write!(
                f,
                "operation {operation} was answered {code} (nothing sent) but the provider has its write"
            ),
            Violation::Split {
                operation,
                invocations,
            } => write!(
                f,
                "operation {operation} was answered with invocations {}",
                invocations.join(", ")
            ),
            Violation::ApprovalDecidedTwice {
                approval,
                decisions,
            } => write!(f, "approval {approval} holds {decisions} decisions"),
            Violation::LeftDispatching { effect } => {
                write!(f, "effect {effect} is still dispatching after recovery")
            }
            Violation::Reservations { what } => write!(f, "{what}"),
            Violation::Audit { output } => write!(f, "steward audit verify failed: {output}"),
            Violation::Refused { operation, code } => {
                write!(f, "operation {operation} was refused with {code}")
            }
            Violation::NoRecovery { death_at } => write!(
                f,
                "no invoke was acknowledged after the primary died at {:.3} s",
                death_at.as_secs_f64()
            ),
        }
    }
}

/// What the answers to one operation came to.
#[derive(Debug, Default)]
struct Answers {
    invocations: Vec<String>,
    /// The first answer said nothing was sent (and the agent gave the key up).
    told_not_sent: Option<String>,
    refused: Option<String>,
    answered: bool,
}

fn answers(events: &[Stamped]) -> BTreeMap<String, Answers> {
    let mut by_operation: BTreeMap<String, Answers> = BTreeMap::new();
    for stamped in events {
        let Event::Answer {
            operation, answer, ..
        } = &stamped.event
        else {
            continue;
        };
        let seen = by_operation.entry(operation.clone()).or_default();
        let first = !seen.answered;
        seen.answered = true;
        match answer {
            Answer::Acknowledged { invocation, .. } => {
                if !seen.invocations.contains(invocation) {
                    seen.invocations.push(invocation.clone());
                }
            }
            Answer::NotSent { code, .. } if first => seen.told_not_sent = Some(code.clone()),
            Answer::Refused { code, .. } => seen.refused = Some(code.clone()),
            Answer::NotSent { .. } | Answer::Retry { .. } | Answer::Unanswered { .. } => {}
        }
    }
    by_operation
}

/// Statuses an acknowledged operation may rest in after recovery.
fn settled(status: &str) -> bool {
    matches!(
        status,
        "succeeded" | "failed" | "denied" | "expired" | "unknown"
    )
}

/// Every violation, in a stable order: per operation (by key), then approvals, effects, the
/// limit, the audit chain and recovery.
pub(crate) fn check(
    operations: &[Operation],
    events: &[Stamped],
    state: &FinalState,
) -> Vec<Violation> {
    let mut found = vec![];
    let by_operation = answers(events);
    let none = Answers::default();
    let mut sorted: Vec<&Operation> = operations.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    for op in sorted {
        let writes = state.writes.get(&op.payment_intent).copied().unwrap_or(0);
        let seen = by_operation.get(&op.key).unwrap_or(&none);
        let operation = op.key.clone();
        if writes > 1 {
            found.push(Violation::Duplicate {
                operation: operation.clone(),
                writes,
            });
        }
        if let Some(code) = &seen.refused {
            found.push(Violation::Refused {
                operation: operation.clone(),
                code: code.clone(),
            });
        }
        if let Some(code) = &seen.told_not_sent {
            if writes > 0 {
                found.push(Violation::NotSentButWritten {
                    operation: operation.clone(),
                    code: code.clone(),
                });
            }
        }
        if seen.invocations.len() > 1 {
            found.push(Violation::Split {
                operation: operation.clone(),
                invocations: seen.invocations.clone(),
            });
        }
        let Some(invocation) = seen.invocations.first() else {
            continue;
        };
        match state.invocations.get(invocation) {
            None => found.push(Violation::Lost {
                operation,
                invocation: invocation.clone(),
            }),
            Some(stored) if !settled(&stored.status) => found.push(Violation::NoOutcome {
                operation,
                status: stored.status.clone(),
            }),
            Some(stored) if stored.status == "succeeded" && writes == 0 => {
                found.push(Violation::SucceededWithoutWrite { operation })
            }
            Some(stored)
                if matches!(stored.status.as_str(), "failed" | "denied" | "expired")
                    && writes > 0 =>
            {
                found.push(Violation::FailedWithWrite {
                    operation,
                    status: stored.status.clone(),
                })
            }
            Some(_) => {}
        }
    }
    let mut approvals: Vec<(&String, &usize)> = state.approval_decisions.iter().collect();
    approvals.sort();
    for (approval, &decisions) in approvals {
        if decisions > 1 {
            found.push(Violation::ApprovalDecidedTwice {
                approval: approval.clone(),
                decisions,
            });
        }
    }
    for effect in &state.effects {
        if effect.stage == "dispatching" {
            found.push(Violation::LeftDispatching {
                effect: effect.id.clone(),
            });
        }
    }
    if let Some(usage) = state.limit {
        found.extend(reservations(operations, &state.effects, usage));
    }
    if let Some(output) = &state.audit_failure {
        found.push(Violation::Audit {
            output: output.clone(),
        });
    }
    for death_at in deaths(events) {
        if recovery_after(events, death_at).is_none() {
            found.push(Violation::NoRecovery { death_at });
        }
    }
    found
}

/// The impact limit against the effects: consumed is what succeeded, the unknown exposure what
/// is unknown, and nothing is still reserved once recovery is done.
fn reservations(
    operations: &[Operation],
    effects: &[StoredEffect],
    usage: LimitUsage,
) -> Option<Violation> {
    let amounts: HashMap<&str, i64> = operations
        .iter()
        .map(|o| (o.key.as_str(), o.amount))
        .collect();
    let mut expected = LimitUsage::default();
    for effect in effects {
        let Some(amount) = effect.operation_key.as_deref().and_then(|k| amounts.get(k)) else {
            continue;
        };
        match (effect.outcome.as_str(), effect.stage.as_str()) {
            ("succeeded", _) => expected.consumed += amount,
            ("unknown", _) => expected.unknown_exposure += amount,
            (_, "ready" | "dispatching") => expected.reserved += amount,
            _ => {}
        }
    }
    (usage != expected).then(|| Violation::Reservations {
        what: format!(
            "the limit holds consumed {} reserved {} unknown {}; the effects add up to consumed {} reserved {} unknown {}",
            usage.consumed,
            usage.reserved,
            usage.unknown_exposure,
            expected.consumed,
            expected.reserved,
            expected.unknown_exposure
        ),
    })
}

/// When each outage began.
pub(crate) fn deaths(events: &[Stamped]) -> Vec<Duration> {
    events
        .iter()
        .filter(|s| s.event == Event::PrimaryDeath)
        .map(|s| s.at)
        .collect()
}

/// The recovery time after a death at `death_at`: until the first acknowledged invoke whose
/// request left after the death. `None` when there was none.
pub(crate) fn recovery_after(events: &[Stamped], death_at: Duration) -> Option<Duration> {
    events
        .iter()
        .filter_map(|s| match &s.event {
            Event::Answer {
                sent_at,
                answer: Answer::Acknowledged { .. },
                ..
            } if *sent_at >= death_at => Some(s.at.saturating_sub(death_at)),
            _ => None,
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(n: u32) -> Operation {
        Operation {
            key: format!("op-{n}"),
            payment_intent: format!("pi_{n}"),
            amount: 100 + i64::from(n),
        }
    }

    fn at(ms: u64, event: Event) -> Stamped {
        Stamped {
            at: Duration::from_millis(ms),
            event,
        }
    }

    fn answer(ms: u64, n: u32, answer: Answer) -> Stamped {
        at(
            ms,
            Event::Answer {
                operation: format!("op-{n}"),
                replica: 0,
                sent_at: Duration::from_millis(ms.saturating_sub(10)),
                answer,
            },
        )
    }

    fn acked(ms: u64, n: u32) -> Stamped {
        answer(
            ms,
            n,
            Answer::Acknowledged {
                invocation: format!("inv_{n}"),
                status: "succeeded".into(),
            },
        )
    }

    fn effect(n: u32, outcome: &str, stage: &str) -> StoredEffect {
        StoredEffect {
            id: format!("eff_{n}"),
            operation_key: Some(format!("op-{n}")),
            outcome: outcome.into(),
            stage: stage.into(),
        }
    }

    /// Two operations, both acknowledged, succeeded, written once, and the limit agreeing.
    fn healthy() -> (Vec<Operation>, Vec<Stamped>, FinalState) {
        let ops = vec![op(1), op(2)];
        let events = vec![acked(100, 1), acked(200, 2)];
        let state = FinalState {
            writes: HashMap::from([("pi_1".into(), 1), ("pi_2".into(), 1)]),
            invocations: HashMap::from([
                (
                    "inv_1".into(),
                    StoredInvocation {
                        status: "succeeded".into(),
                    },
                ),
                (
                    "inv_2".into(),
                    StoredInvocation {
                        status: "succeeded".into(),
                    },
                ),
            ]),
            effects: vec![
                effect(1, "succeeded", "settled"),
                effect(2, "succeeded", "settled"),
            ],
            approval_decisions: HashMap::from([("apr_1".into(), 1)]),
            limit: Some(LimitUsage {
                consumed: 101 + 102,
                reserved: 0,
                unknown_exposure: 0,
            }),
            audit_failure: None,
        };
        (ops, events, state)
    }

    fn names(found: &[Violation]) -> Vec<&'static str> {
        found.iter().map(Violation::name).collect()
    }

    #[test]
    fn a_healthy_run_has_no_violation() {
        let (ops, events, state) = healthy();
        assert_eq!(check(&ops, &events, &state), vec![]);
    }

    #[test]
    fn two_writes_for_one_key_are_a_duplicate() {
        let (ops, events, mut state) = healthy();
        state.writes.insert("pi_2".into(), 2);
        let found = check(&ops, &events, &state);
        assert_eq!(
            found,
            vec![Violation::Duplicate {
                operation: "op-2".into(),
                writes: 2
            }]
        );
        assert_eq!(
            found[0].to_string(),
            "duplicate: operation op-2 has 2 provider writes"
        );
    }

    #[test]
    fn an_acknowledged_operation_the_store_lacks_is_lost() {
        let (ops, events, mut state) = healthy();
        state.invocations.remove("inv_1");
        assert_eq!(
            check(&ops, &events, &state),
            vec![Violation::Lost {
                operation: "op-1".into(),
                invocation: "inv_1".into()
            }]
        );
    }

    #[test]
    fn an_operation_never_acknowledged_may_be_missing() {
        let (mut ops, events, state) = healthy();
        ops.push(op(3));
        assert_eq!(check(&ops, &events, &state), vec![]);
    }

    #[test]
    fn an_effect_left_dispatching_is_named_and_counted_as_reserved() {
        let (mut ops, mut events, mut state) = healthy();
        ops.push(op(3));
        events.push(answer(
            300,
            3,
            Answer::Acknowledged {
                invocation: "inv_3".into(),
                status: "running".into(),
            },
        ));
        state.invocations.insert(
            "inv_3".into(),
            StoredInvocation {
                status: "unknown".into(),
            },
        );
        state.effects.push(effect(3, "pending", "dispatching"));
        let found = check(&ops, &events, &state);
        assert_eq!(names(&found), vec!["left dispatching", "reservations"]);
        assert_eq!(
            found[0].to_string(),
            "left dispatching: effect eff_3 is still dispatching after recovery"
        );
    }

    #[test]
    fn a_first_answer_of_not_sent_with_a_write_is_a_lie() {
        let (mut ops, mut events, mut state) = healthy();
        ops.push(op(3));
        events.push(answer(
            300,
            3,
            Answer::NotSent {
                status: 503,
                code: "STORAGE_UNAVAILABLE".into(),
            },
        ));
        state.writes.insert("pi_3".into(), 1);
        assert_eq!(
            check(&ops, &events, &state),
            vec![Violation::NotSentButWritten {
                operation: "op-3".into(),
                code: "STORAGE_UNAVAILABLE".into()
            }]
        );
    }

    #[test]
    fn not_sent_after_an_unanswered_request_proves_nothing() {
        let (mut ops, mut events, mut state) = healthy();
        ops.push(op(3));
        events.push(answer(
            300,
            3,
            Answer::Unanswered {
                reason: "timed out".into(),
            },
        ));
        events.push(answer(
            400,
            3,
            Answer::NotSent {
                status: 503,
                code: "STORAGE_UNAVAILABLE".into(),
            },
        ));
        state.writes.insert("pi_3".into(), 1);
        assert_eq!(check(&ops, &events, &state), vec![]);
    }

    #[test]
    fn final_statuses_the_provider_contradicts() {
        let (ops, events, mut state) = healthy();
        state.writes.insert("pi_1".into(), 0);
        state.invocations.insert(
            "inv_2".into(),
            StoredInvocation {
                status: "denied".into(),
            },
        );
        state.effects[0].outcome = "failed".into();
        state.effects[1].outcome = "failed".into();
        state.limit = Some(LimitUsage::default());
        assert_eq!(
            names(&check(&ops, &events, &state)),
            vec!["success without a write", "failure with a write"]
        );
    }

    #[test]
    fn still_running_after_recovery_has_no_outcome() {
        let (ops, events, mut state) = healthy();
        state.invocations.insert(
            "inv_1".into(),
            StoredInvocation {
                status: "running".into(),
            },
        );
        assert_eq!(names(&check(&ops, &events, &state)), vec!["no outcome"]);
    }

    #[test]
    fn two_invocations_for_one_key_are_a_split() {
        let (ops, mut events, mut state) = healthy();
        events.push(answer(
            300,
            1,
            Answer::Acknowledged {
                invocation: "inv_9".into(),
                status: "succeeded".into(),
            },
        ));
        state.invocations.insert(
            "inv_9".into(),
            StoredInvocation {
                status: "succeeded".into(),
            },
        );
        assert_eq!(names(&check(&ops, &events, &state)), vec!["split"]);
    }

    #[test]
    fn approvals_limits_audit_and_refusals() {
        let (ops, mut events, mut state) = healthy();
        state.approval_decisions.insert("apr_2".into(), 2);
        state.limit = Some(LimitUsage {
            consumed: 101,
            reserved: 0,
            unknown_exposure: 0,
        });
        state.audit_failure = Some("chain broken at event 7".into());
        events.push(answer(
            300,
            2,
            Answer::Refused {
                status: 409,
                code: "operation_key_conflict".into(),
            },
        ));
        assert_eq!(
            names(&check(&ops, &events, &state)),
            vec!["refused", "approval decided twice", "reservations", "audit"]
        );
    }

    #[test]
    fn recovery_is_timed_from_the_death_to_the_first_acknowledged_request_sent_after_it() {
        let (ops, mut events, state) = healthy();
        events.push(at(1_000, Event::PrimaryDeath));
        // Sent before the death, answered after: not a recovery.
        events.push(Stamped {
            at: Duration::from_millis(1_500),
            event: Event::Answer {
                operation: "op-1".into(),
                replica: 0,
                sent_at: Duration::from_millis(900),
                answer: Answer::Acknowledged {
                    invocation: "inv_1".into(),
                    status: "succeeded".into(),
                },
            },
        });
        assert_eq!(recovery_after(&events, Duration::from_secs(1)), None);
        assert_eq!(names(&check(&ops, &events, &state)), vec!["no recovery"]);
        events.push(Stamped {
            at: Duration::from_millis(4_200),
            event: Event::Answer {
                operation: "op-2".into(),
                replica: 1,
                sent_at: Duration::from_millis(3_000),
                answer: Answer::Acknowledged {
                    invocation: "inv_2".into(),
                    status: "succeeded".into(),
                },
            },
        });
        assert_eq!(
            recovery_after(&events, Duration::from_secs(1)),
            Some(Duration::from_millis(3_200))
        );
        assert_eq!(check(&ops, &events, &state), vec![]);
    }
}
