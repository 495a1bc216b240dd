//! The impact tally of one effect against the environment's limits, the same in every backend:
//! the backend reads the limits' statuses in the reservation's transaction, this decides, and
//! the backend writes the reservations or the refusal it returns.

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::governance::{ImpactRequest, LimitStatus, ReserveOutcome};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use steward_core::impact::check;
use steward_core::{LimitId, Millis};

/// One reservation to write: the limit, the amount, and the window it counts in.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hold {
    pub limit: LimitId,
    pub amount: i64,
    pub window_start: Millis,
}

/// What the tally decided.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tally {
    /// Reserve these (possibly none: no limit applies).
    Reserve(Vec<Hold>),
    /// A limit cannot take it: nothing is reserved. `audit` is the `impact.refused` event's
    /// `after`; `outcome` what the caller hears.
    Refuse {
        audit: Value,
        outcome: ReserveOutcome,
    },
}

/// Tallies `request` against `limits`. Per limit, what the effect asks of it adds up over its
/// quantities (a limit may cap more than one of them only if they share a unit; their sum must
/// fit); the first limit that cannot take its share refuses the whole effect.
pub(crate) fn tally(request: &ImpactRequest, limits: &[LimitStatus]) -> Tally {
    let mut asked: BTreeMap<LimitId, (&LimitStatus, i64)> = BTreeMap::new();
    for quantity in &request.quantities {
        for status in limits.iter().filter(|s| {
            s.limit
                .spec
                .applies(&request.action_name, request.resource.as_deref(), quantity)
        }) {
            let entry = asked.entry(status.limit.id.clone()).or_insert((status, 0));
            let mut usage = status.usage;
            usage.reserved = usage.reserved.saturating_add(entry.1);
            match check(status.limit.spec.amount, usage, quantity) {
                Ok(amount) => {
                    entry.1 += amount;
                    assert!(
                        entry.1 >= 0,
                        "a reservation of effect {} on limit {} is below zero",
                        request.effect_id,
                        status.limit.id
                    );
                }
                Err(refusal) => {
                    return Tally::Refuse {
                        audit: json!({
                            "limitId": status.limit.id, "refusal": format!("{refusal:?}"),
                            "available": usage.available(status.limit.spec.amount),
                        }),
                        outcome: ReserveOutcome::Refused {
                            limit_id: status.limit.id.clone(),
                            limit_name: status.limit.spec.name.clone(),
                            refusal,
                        },
                    }
                }
            }
        }
    }
    Tally::Reserve(
        asked
            .into_iter()
            .map(|(limit, (status, amount))| Hold {
                limit,
                amount,
                window_start: status.window_start,
            })
            .collect(),
    )
}

/// The `impact.reserved` event's `after`, or `None` when nothing was reserved.
pub(crate) fn reserved_audit(holds: &[Hold]) -> Option<Value> {
    (!holds.is_empty()).then(|| {
        json!({"reservations": holds
            .iter()
            .map(|h| json!({"limitId": h.limit, "amount": h.amount}))
            .collect::<Vec<_>>()})
    })
}

/// The `impact.refused` event of `request`, with the refusal's record (`Tally::Refuse`'s
/// `audit`).
pub(crate) fn refused_entry(request: &ImpactRequest, audit: Value) -> AuditEntry {
    AuditEntry::new(
        AuditKind::ImpactRefused,
        request.env_id.as_str(),
        request.effect_id.as_str(),
    )
    .after(audit)
}

/// The `impact.reserved` event of `request` for `holds`, or `None` when nothing was reserved.
pub(crate) fn reserved_entry(request: &ImpactRequest, holds: &[Hold]) -> Option<AuditEntry> {
    reserved_audit(holds).map(|audit| {
        AuditEntry::new(
            AuditKind::ImpactReserved,
            request.env_id.as_str(),
            request.effect_id.as_str(),
        )
        .after(audit)
    })
}

/// What the caller hears for reserved `holds`.
pub(crate) fn reserved(holds: Vec<Hold>) -> ReserveOutcome {
    ReserveOutcome::Reserved(holds.into_iter().map(|h| (h.limit, h.amount)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governance::LimitRecord;
    use crate::records::Actor;
    use steward_core::impact::{LimitSpec, Period, Quantity, Refusal, Usage};
    use steward_core::{EffectId, EnvironmentId};

    fn limit(id: &str, amount: i64, reserved: i64, action: Option<&str>) -> LimitStatus {
        LimitStatus {
            limit: LimitRecord {
                id: LimitId::from_unique(id),
                env_id: EnvironmentId::from_unique("e"),
                spec: LimitSpec {
                    name: id.into(),
                    dimension: "money".into(),
                    unit: "usd".into(),
                    currency: Some("usd".into()),
                    period: Period::Day,
                    amount,
                    action_name: action.map(str::to_string),
                    resource_prefix: None,
                },
                archived_at: None,
                created_at: Millis(0),
                updated_at: Millis(0),
            },
            window_start: Millis(100),
            usage: Usage {
                consumed: 0,
                reserved,
                exposure: 0,
            },
        }
    }

    fn request(amounts: &[Option<i64>]) -> ImpactRequest {
        ImpactRequest {
            env_id: EnvironmentId::from_unique("e"),
            effect_id: EffectId::from_unique("f"),
            action_name: "refund".into(),
            resource: None,
            quantities: amounts
                .iter()
                .map(|&amount| Quantity {
                    dimension: "money".into(),
                    unit: "usd".into(),
                    amount,
                })
                .collect(),
            actor: Actor::system(Millis(1)),
        }
    }

    #[test]
    fn quantities_add_up_per_limit_and_only_applicable_limits_hold_anything() {
        let limits = [
            limit("a", 1_000, 0, None),
            limit("b", 1_000, 0, Some("other-action")),
        ];
        let Tally::Reserve(holds) = tally(&request(&[Some(300), Some(200)]), &limits) else {
            panic!("refused")
        };
        assert_eq!(
            holds,
            vec![Hold {
                limit: LimitId::from_unique("a"),
                amount: 500,
                window_start: Millis(100),
            }]
        );
        assert!(reserved_audit(&holds).is_some());
        assert_eq!(reserved_audit(&[]), None);
        assert_eq!(tally(&request(&[Some(5)]), &[]), Tally::Reserve(Vec::new()));
    }

    #[test]
    fn a_share_that_does_not_fit_refuses_the_whole_effect() {
        let limits = [limit("a", 1_000, 600, None)];
        // 300 fits alone, but with the second 300 of the same effect it would not.
        let Tally::Refuse { outcome, audit } = tally(&request(&[Some(300), Some(300)]), &limits)
        else {
            panic!("reserved past the limit")
        };
        assert_eq!(
            outcome,
            ReserveOutcome::Refused {
                limit_id: LimitId::from_unique("a"),
                limit_name: "a".into(),
                refusal: Refusal::Exhausted {
                    requested: 300,
                    available: 100,
                },
            }
        );
        assert_eq!(audit["available"], 100);
        let missing = tally(&request(&[None]), &limits);
        assert!(matches!(
            missing,
            Tally::Refuse {
                outcome: ReserveOutcome::Refused {
                    refusal: Refusal::MissingQuantity,
                    ..
                },
                ..
            }
        ));
    }
}
