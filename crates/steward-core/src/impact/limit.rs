//! Impact limits: a shared cap on one unit per period, and the arithmetic of reserving against it.
//!
//! A limit's usage in the current window is what settled effects consumed, what in-flight effects
//! reserved, and what `unknown` effects may have used (exposure). An effect fits when all of that
//! plus its own quantity stays within the limit's amount.

use super::declaration::{is_currency, is_valid_dimension, Quantity, MONEY};
use crate::action::{validate_name, FieldError};
#[cfg(test)]
use crate::effect::EffectState;
use crate::time::{civil_from_days, days_from_civil, Millis};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The longest limit name, in bytes.
pub const LIMIT_NAME_LEN_MAX: usize = 100;
/// The largest limit amount: far above any real cap, far below where sums could overflow.
pub const LIMIT_AMOUNT_MAX: i64 = 1_000_000_000_000_000;
/// One UTC day, in milliseconds.
const DAY_MS: i64 = 86_400_000;

/// The window a limit counts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    /// The UTC calendar day.
    Day,
    /// The UTC calendar month.
    Month,
    /// Forever.
    Total,
}

impl Period {
    pub const ALL: [Period; 3] = [Period::Day, Period::Month, Period::Total];

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
            Period::Total => "total",
        }
    }

    pub fn parse(value: &str) -> Option<Period> {
        Self::ALL.into_iter().find(|p| p.as_str() == value)
    }

    /// The start of the window that contains `now`.
    pub fn window_start(self, now: Millis) -> Millis {
        match self {
            Period::Total => Millis(0),
            Period::Day => Millis(now.0.div_euclid(DAY_MS) * DAY_MS),
            Period::Month => {
                let (y, m, _) = civil_from_days(now.0.div_euclid(DAY_MS));
                Millis(days_from_civil(y, m, 1) * DAY_MS)
            }
        }
    }
}

/// A limit's definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSpec {
    pub name: String,
    pub dimension: String,
    /// The currency (lower case) for money, the dimension name otherwise.
    pub unit: String,
    pub currency: Option<String>,
    pub period: Period,
    pub amount: i64,
    /// Narrows the limit to one action; `None` caps every action in the environment.
    pub action_name: Option<String>,
    /// Narrows the limit to effects whose resource (the URL of what they change, see
    /// `Steward's adapters::resource`) starts with this; an effect whose resource cannot be told
    /// counts against it anyway (a cap never under-counts).
    pub resource_prefix: Option<String>,
}

/// The longest `resourcePrefix`, in bytes.
pub const RESOURCE_PREFIX_LEN_MAX: usize = 512;

/// The fields a limit create body may carry.
pub const LIMIT_FIELDS: [&str; 8] = [
    "name",
    "dimension",
    "period",
    "amount",
    "currency",
    "unit",
    "actionName",
    "resourcePrefix",
];

fn text(map: &Map<String, Value>, field: &str) -> Result<Option<String>, FieldError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(FieldError::new(field, "must be a string")),
    }
}

/// Checks a limit's name.
pub fn check_limit_name(name: &str) -> Result<String, FieldError> {
    let name = name.trim();
    if name.is_empty() || name.len() > LIMIT_NAME_LEN_MAX {
        return Err(FieldError::new(
            "name",
            format!("must be 1-{LIMIT_NAME_LEN_MAX} characters"),
        ));
    }
    crate::check_text("name", name, crate::TextKind::Line)?;
    Ok(name.to_string())
}

/// Checks a limit's amount.
pub fn check_limit_amount(value: &Value) -> Result<i64, FieldError> {
    match value.as_i64() {
        Some(a) if (0..=LIMIT_AMOUNT_MAX).contains(&a) => Ok(a),
        _ => Err(FieldError::new(
            "amount",
            format!("must be an integer from 0 to {LIMIT_AMOUNT_MAX}"),
        )),
    }
}

impl LimitSpec {
    /// A limit from a create body; errors name the field.
    pub fn from_create(body: &Map<String, Value>) -> Result<LimitSpec, FieldError> {
        let resource_prefix = text(body, "resourcePrefix")?;
        if let Some(prefix) = &resource_prefix {
            if prefix.is_empty() || prefix.len() > RESOURCE_PREFIX_LEN_MAX {
                return Err(FieldError::new(
                    "resourcePrefix",
                    format!("must be 1-{RESOURCE_PREFIX_LEN_MAX} bytes"),
                ));
            }
            crate::check_text("resourcePrefix", prefix, crate::TextKind::Line)?;
        }
        let name = check_limit_name(
            &text(body, "name")?.ok_or_else(|| FieldError::new("name", "is required"))?,
        )?;
        let dimension =
            text(body, "dimension")?.ok_or_else(|| FieldError::new("dimension", "is required"))?;
        if !is_valid_dimension(&dimension) {
            return Err(FieldError::new(
                "dimension",
                "must be money, resource_mutations or a unit matching ^[a-z][a-z0-9_]{0,31}$",
            ));
        }
        let period = match text(body, "period")? {
            Some(p) => Period::parse(&p)
                .ok_or_else(|| FieldError::new("period", "must be day, month or total"))?,
            None => return Err(FieldError::new("period", "is required")),
        };
        let amount = check_limit_amount(body.get("amount").unwrap_or(&Value::Null))?;
        let currency = text(body, "currency")?;
        let unit = text(body, "unit")?;
        let (unit, currency) = if dimension == MONEY {
            let currency = currency
                .or(unit.clone())
                .filter(|c| is_currency(c))
                .ok_or_else(|| {
                    FieldError::new(
                        "currency",
                        "is required for money: a three-letter currency such as usd",
                    )
                })?;
            let currency = currency.to_ascii_lowercase();
            if unit.is_some_and(|u| !u.eq_ignore_ascii_case(&currency)) {
                return Err(FieldError::new(
                    "unit",
                    "must be the currency (or left out) for money",
                ));
            }
            (currency.clone(), Some(currency))
        } else {
            if currency.is_some() {
                return Err(FieldError::new("currency", "applies to money only"));
            }
            if unit.as_ref().is_some_and(|u| *u != dimension) {
                return Err(FieldError::new(
                    "unit",
                    "must be the dimension name (or left out) for anything but money",
                ));
            }
            (dimension.clone(), None)
        };
        let action_name = text(body, "actionName")?;
        if let Some(action) = &action_name {
            validate_name(action).map_err(|e| FieldError::new("actionName", e.message))?;
        }
        Ok(LimitSpec {
            name,
            dimension,
            unit,
            currency,
            period,
            amount,
            action_name,
            resource_prefix,
        })
    }

    /// Does this limit cap `quantity` of an invocation of `action_name` changing `resource`?
    pub fn applies(&self, action_name: &str, resource: Option<&str>, quantity: &Quantity) -> bool {
        let resource_matches = match (&self.resource_prefix, resource) {
            (Some(prefix), Some(resource)) => resource.starts_with(prefix.as_str()),
            // No prefix, or a resource that cannot be told: the limit counts it.
            _ => true,
        };
        resource_matches
            && self.dimension == quantity.dimension
            && self.unit == quantity.unit
            && self
                .action_name
                .as_deref()
                .is_none_or(|name| name == action_name)
    }
}

/// A limit's usage in one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub consumed: i64,
    pub reserved: i64,
    /// Reserved by effects whose outcome is `unknown`: they may have happened.
    pub exposure: i64,
}

impl Usage {
    pub fn used(self) -> i64 {
        self.consumed
            .saturating_add(self.reserved)
            .saturating_add(self.exposure)
    }

    /// What is left; never negative (lowering a limit releases no exposure).
    pub fn available(self, limit: i64) -> i64 {
        limit.saturating_sub(self.used()).max(0)
    }

    /// True when `amount` more stays within `limit`.
    pub fn fits(self, limit: i64, amount: i64) -> bool {
        self.used()
            .checked_add(amount)
            .is_some_and(|total| total <= limit)
    }
}

/// Why an effect cannot reserve against a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The invocation's input does not hold the quantity the limit needs.
    MissingQuantity,
    /// The quantity does not fit what is left.
    Exhausted { requested: i64, available: i64 },
}

/// Checks one quantity against one limit's current usage.
pub fn check(limit_amount: i64, usage: Usage, quantity: &Quantity) -> Result<i64, Refusal> {
    let amount = quantity.amount.ok_or(Refusal::MissingQuantity)?;
    if usage.fits(limit_amount, amount) {
        Ok(amount)
    } else {
        Err(Refusal::Exhausted {
            requested: amount,
            available: usage.available(limit_amount),
        })
    }
}

/// Where one reservation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReservationState {
    /// Held for an effect that has not settled.
    Reserved,
    /// The effect happened.
    Consumed,
    /// The effect provably did not happen.
    Released,
    /// The effect's outcome is unknown: it may have happened.
    Exposure,
}

impl ReservationState {
    pub const ALL: [ReservationState; 4] = [
        ReservationState::Reserved,
        ReservationState::Consumed,
        ReservationState::Released,
        ReservationState::Exposure,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReservationState::Reserved => "reserved",
            ReservationState::Consumed => "consumed",
            ReservationState::Released => "released",
            ReservationState::Exposure => "exposure",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }

    /// The states a reservation may move from when its effect's settlement is `self`: exposure
    /// only from reserved (an unknown outcome holds what was reserved), consumed or released
    /// from reserved or exposure (a settled effect ends what it held); nothing moves into
    /// reserved. Settled reservations never move again.
    pub fn settles_from(self) -> &'static [ReservationState] {
        match self {
            ReservationState::Exposure => &[ReservationState::Reserved],
            ReservationState::Consumed | ReservationState::Released => {
                &[ReservationState::Reserved, ReservationState::Exposure]
            }
            ReservationState::Reserved => &[],
        }
    }
}

/// What an effect's reservations hold once the effect is in `to`, read off the state alone: a
/// model the tests hold the transition's work against (`crate::settlement` is what the write
/// path applies).
#[cfg(test)]
pub(crate) fn reservation_after(to: EffectState) -> Option<ReservationState> {
    match to {
        EffectState::Succeeded { .. } => Some(ReservationState::Consumed),
        EffectState::Failed | EffectState::Rejected { .. } => Some(ReservationState::Released),
        EffectState::Unknown => Some(ReservationState::Exposure),
        EffectState::AwaitingApproval | EffectState::Ready | EffectState::Dispatching => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effect::{next, EffectEvent, Work};
    use proptest::prelude::*;
    use serde_json::json;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn reservation_settlement_follows_the_state_machine_work() {
        for state in EffectState::ALL {
            for event in EffectEvent::ALL {
                let Ok((to, work)) = next(state, event) else {
                    continue;
                };
                let after = reservation_after(to);
                assert_eq!(
                    work.contains(&Work::ConsumeImpact),
                    after == Some(ReservationState::Consumed) && state != to,
                    "{state:?} x {event:?}"
                );
                assert_eq!(
                    work.contains(&Work::ReleaseImpact),
                    after == Some(ReservationState::Released),
                    "{state:?} x {event:?}"
                );
                if work.contains(&Work::QueueReconcile) {
                    assert_eq!(after, Some(ReservationState::Exposure));
                }
            }
        }
    }

    #[test]
    fn a_settled_reservation_never_moves_again_and_nothing_moves_back_to_reserved() {
        use ReservationState as R;
        for after in R::ALL {
            for &from in after.settles_from() {
                assert!(
                    matches!(from, R::Reserved | R::Exposure),
                    "{from:?} is settled: it must not move to {after:?}"
                );
                assert_ne!(from, after, "{after:?} does not move into itself");
            }
        }
        assert!(R::Reserved.settles_from().is_empty());
        assert_eq!(R::Exposure.settles_from(), [R::Reserved]);
    }

    #[test]
    fn windows() {
        // 2026-12-02T11:17:44.123Z
        let now = Millis(1_796_210_264_123);
        assert_eq!(Period::Total.window_start(now), Millis(0));
        assert_eq!(
            Period::Day.window_start(now).to_rfc3339(),
            "2026-12-02T00:00:00.000Z"
        );
        assert_eq!(
            Period::Month.window_start(now).to_rfc3339(),
            "2026-12-01T00:00:00.000Z"
        );
        assert_eq!(
            Period::Month
                .window_start(Millis(951_782_400_000))
                .to_rfc3339(),
            "2000-02-01T00:00:00.000Z"
        );
    }

    #[test]
    fn create_bodies() {
        let money = LimitSpec::from_create(&body(json!({"name": "Daily refunds", "dimension": "money", "currency": "USD", "period": "day", "amount": 10_000}))).unwrap();
        assert_eq!(
            (money.unit.as_str(), money.currency.as_deref()),
            ("usd", Some("usd"))
        );
        let emails = LimitSpec::from_create(&body(
            json!({"name": "e", "dimension": "emails", "period": "day", "amount": 500}),
        ))
        .unwrap();
        assert_eq!(emails.unit, "emails");
        let cases = [
            (
                json!({"dimension": "emails", "period": "day", "amount": 1}),
                "name",
            ),
            (
                json!({"name": "x", "period": "day", "amount": 1}),
                "dimension",
            ),
            (
                json!({"name": "x", "dimension": "emails", "period": "week", "amount": 1}),
                "period",
            ),
            (
                json!({"name": "x", "dimension": "emails", "period": "day", "amount": -1}),
                "amount",
            ),
            (
                json!({"name": "x", "dimension": "emails", "period": "day", "amount": 1.5}),
                "amount",
            ),
            (
                json!({"name": "x", "dimension": "money", "period": "day", "amount": 1}),
                "currency",
            ),
            (
                json!({"name": "x", "dimension": "emails", "period": "day", "amount": 1, "unit": "rows"}),
                "unit",
            ),
            (
                json!({"name": "x", "dimension": "emails", "period": "day", "amount": 1, "currency": "usd"}),
                "currency",
            ),
            (
                json!({"name": "x", "dimension": "emails", "period": "day", "amount": 1, "resourcePrefix": ""}),
                "resourcePrefix",
            ),
            (
                json!({"name": "x", "dimension": "emails", "period": "day", "amount": 1, "resourcePrefix": "a\nb"}),
                "resourcePrefix",
            ),
            (
                json!({"name": "x", "dimension": "emails", "period": "day", "amount": 1, "actionName": "no spaces"}),
                "actionName",
            ),
        ];
        for (input, field) in cases {
            assert_eq!(
                LimitSpec::from_create(&body(input.clone()))
                    .unwrap_err()
                    .field,
                field,
                "{input}"
            );
        }
    }

    #[test]
    fn applicability() {
        let limit = LimitSpec::from_create(&body(json!({"name": "x", "dimension": "money", "currency": "usd", "period": "total", "amount": 5, "actionName": "refund"}))).unwrap();
        let usd = Quantity {
            dimension: "money".into(),
            unit: "usd".into(),
            amount: Some(1),
        };
        let eur = Quantity {
            unit: "eur".into(),
            ..usd.clone()
        };
        assert!(limit.applies("refund", None, &usd));
        assert!(!limit.applies("refund", None, &eur));
        assert!(!limit.applies("other", None, &usd));
        let narrowed = LimitSpec {
            resource_prefix: Some("https://api.example.com/repos/acme/".into()),
            ..limit.clone()
        };
        assert!(narrowed.applies("refund", Some("https://api.example.com/repos/acme/x"), &usd));
        assert!(!narrowed.applies(
            "refund",
            Some("https://api.example.com/repos/other/x"),
            &usd
        ));
        assert!(
            narrowed.applies("refund", None, &usd),
            "an unknown resource counts"
        );
    }

    #[test]
    fn checks() {
        let q = |a| Quantity {
            dimension: "d".into(),
            unit: "d".into(),
            amount: a,
        };
        let usage = Usage {
            consumed: 4,
            reserved: 3,
            exposure: 2,
        };
        assert_eq!(check(10, usage, &q(Some(1))), Ok(1));
        assert_eq!(
            check(10, usage, &q(Some(2))),
            Err(Refusal::Exhausted {
                requested: 2,
                available: 1
            })
        );
        assert_eq!(check(10, usage, &q(None)), Err(Refusal::MissingQuantity));
        assert_eq!(
            usage.available(5),
            0,
            "lowering a limit never goes negative"
        );
    }

    proptest! {
        /// Reserving one by one never lets usage pass the limit, and exactly floor(limit/amount)
        /// reservations fit.
        #[test]
        fn sequential_reservations_stop_at_the_limit(limit in 0i64..200, amount in 1i64..20, tries in 0usize..300) {
            let mut usage = Usage::default();
            let mut granted = 0i64;
            let q = Quantity { dimension: "d".into(), unit: "d".into(), amount: Some(amount) };
            for _ in 0..tries {
                if let Ok(a) = check(limit, usage, &q) { usage.reserved += a; granted += 1; }
                prop_assert!(usage.used() <= limit);
            }
            prop_assert_eq!(granted, (limit / amount).min(tries as i64));
        }
    }
}
