//! What an action declares it changes (`impact`), and the quantities one invocation carries.

use super::amount::AmountExpr;
use crate::action::{ActionDefinition, FieldError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The money dimension: integer minor units of one currency.
pub const MONEY: &str = "money";
/// The count of provider-side writes.
pub const RESOURCE_MUTATIONS: &str = "resource_mutations";
/// The longest declared unit name, in bytes (`^[a-z][a-z0-9_]{0,31}$`).
pub const DIMENSION_LEN_MAX: usize = 32;

/// Whether the declared amount is exactly what happens or an upper bound of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Exact,
    UpperBound,
}

/// One validated, normalised impact declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImpactDeclaration {
    pub dimension: String,
    /// The currency (lower case) for money, the dimension name otherwise.
    pub unit: String,
    pub amount: String,
    pub bound: Bound,
}

/// How much of one unit an invocation changes. `amount` is `None` when the input does not hold
/// the quantity: an applicable limit then refuses the effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    pub dimension: String,
    pub unit: String,
    pub amount: Option<i64>,
}

/// True for `money`, `resource_mutations` and any declared unit `^[a-z][a-z0-9_]{0,31}$`.
pub fn is_valid_dimension(value: &str) -> bool {
    let mut bytes = value.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && value.len() <= DIMENSION_LEN_MAX
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// True for a three-letter currency code, in any case.
pub fn is_currency(value: &str) -> bool {
    value.len() == 3 && value.bytes().all(|b| b.is_ascii_alphabetic())
}

impl ImpactDeclaration {
    /// Parses and normalises an `impact` object; errors name the field as `impact.<field>`.
    pub fn parse(value: &Value) -> Result<ImpactDeclaration, FieldError> {
        let field = |name: &str| format!("impact.{name}");
        let Value::Object(map) = value else {
            return Err(FieldError::new(
                "impact",
                "must be an object {dimension, amount, bound, unit}",
            ));
        };
        if let Some(unknown) = map
            .keys()
            .find(|k| !["dimension", "amount", "bound", "unit"].contains(&k.as_str()))
        {
            return Err(FieldError::new(field(unknown), "is not a known field"));
        }
        let text = |name: &str| -> Result<Option<String>, FieldError> {
            match map.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(FieldError::new(field(name), "must be a string")),
            }
        };
        let dimension =
            text("dimension")?.ok_or_else(|| FieldError::new(field("dimension"), "is required"))?;
        if !is_valid_dimension(&dimension) {
            return Err(FieldError::new(
                field("dimension"),
                "must be money, resource_mutations or a unit matching ^[a-z][a-z0-9_]{0,31}$",
            ));
        }
        let amount =
            text("amount")?.ok_or_else(|| FieldError::new(field("amount"), "is required"))?;
        AmountExpr::parse(&amount).map_err(|e| FieldError::new(field("amount"), e.to_string()))?;
        let bound = match text("bound")?.as_deref() {
            Some("exact") => Bound::Exact,
            Some("upper_bound") => Bound::UpperBound,
            Some(_) => {
                return Err(FieldError::new(
                    field("bound"),
                    "must be exact or upper_bound",
                ))
            }
            None => return Err(FieldError::new(field("bound"), "is required")),
        };
        let unit = match (dimension.as_str(), text("unit")?) {
            (MONEY, Some(currency)) if is_currency(&currency) => currency.to_ascii_lowercase(),
            (MONEY, _) => {
                return Err(FieldError::new(
                    field("unit"),
                    "is required for money: a three-letter currency such as usd",
                ))
            }
            (_, None) => dimension.clone(),
            (_, Some(unit)) if unit == dimension => unit,
            (_, Some(_)) => {
                return Err(FieldError::new(
                    field("unit"),
                    "must be the dimension name (or left out) for anything but money",
                ))
            }
        };
        Ok(ImpactDeclaration {
            dimension,
            unit,
            amount,
            bound,
        })
    }

    /// The declaration as the action stores and shows it.
    pub fn to_value(&self) -> Value {
        json!({
            "dimension": self.dimension,
            "unit": self.unit,
            "amount": self.amount,
            "bound": self.bound,
        })
    }

    pub fn quantity(&self, input: &Value) -> Quantity {
        Quantity {
            dimension: self.dimension.clone(),
            unit: self.unit.clone(),
            amount: AmountExpr::parse(&self.amount)
                .ok()
                .and_then(|e| e.evaluate(input)),
        }
    }
}

/// The quantities one invocation of a template action `def` with `input` carries: what its
/// `impact` declares, and nothing otherwise. An adapter action's quantities are its adapter's
/// to say (the server's adapter registry), so none are known here.
pub fn quantities(def: &ActionDefinition, input: &Value) -> Vec<Quantity> {
    if def.adapter.is_some() {
        return Vec::new();
    }
    match def.impact.as_ref().map(ImpactDeclaration::parse) {
        Some(Ok(declaration)) => vec![declaration.quantity(input)],
        // A stored declaration that no longer parses holds no quantity it can vouch for.
        Some(Err(_)) | None => Vec::new(),
    }
}

/// The request's money amount, for policies' `minAmount`: the first money quantity.
pub fn money_amount(def: &ActionDefinition, input: &Value) -> Option<i64> {
    quantities(def, input)
        .into_iter()
        .find(|q| q.dimension == MONEY)
        .and_then(|q| q.amount)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(v: Value) -> ActionDefinition {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn declarations_are_normalised_and_refusals_name_the_field() {
        let emails = ImpactDeclaration::parse(
            &json!({"dimension": "emails", "amount": "count(input.to)", "bound": "exact"}),
        )
        .unwrap();
        assert_eq!(emails.unit, "emails");
        assert_eq!(
            emails.to_value(),
            json!({"dimension": "emails", "unit": "emails", "amount": "count(input.to)", "bound": "exact"})
        );
        let money = ImpactDeclaration::parse(
            &json!({"dimension": "money", "amount": "input.amount", "bound": "upper_bound", "unit": "USD"}),
        )
        .unwrap();
        assert_eq!(money.unit, "usd");
        let cases = [
            (json!("x"), "impact"),
            (json!({"amount": "1", "bound": "exact"}), "impact.dimension"),
            (
                json!({"dimension": "Emails", "amount": "1", "bound": "exact"}),
                "impact.dimension",
            ),
            (
                json!({"dimension": "emails", "bound": "exact"}),
                "impact.amount",
            ),
            (
                json!({"dimension": "emails", "amount": "input", "bound": "exact"}),
                "impact.amount",
            ),
            (
                json!({"dimension": "emails", "amount": "1"}),
                "impact.bound",
            ),
            (
                json!({"dimension": "emails", "amount": "1", "bound": "about"}),
                "impact.bound",
            ),
            (
                json!({"dimension": "money", "amount": "1", "bound": "exact"}),
                "impact.unit",
            ),
            (
                json!({"dimension": "emails", "amount": "1", "bound": "exact", "unit": "rows"}),
                "impact.unit",
            ),
            (
                json!({"dimension": "emails", "amount": "1", "bound": "exact", "extra": 1}),
                "impact.extra",
            ),
        ];
        for (value, field) in cases {
            assert_eq!(
                ImpactDeclaration::parse(&value).unwrap_err().field,
                field,
                "{value}"
            );
        }
    }

    #[test]
    fn quantities_of_adapters_templates_and_plain_actions() {
        // An adapter's quantities are its adapter's (`adapters/stripe_refund.rs` in the server).
        let refund = def(
            json!({"name": "r", "adapter": {"type": "stripe.refund", "config": {"mode": "test", "currency": "EUR"}, "credentialSecret": "K"}}),
        );
        assert!(quantities(&refund, &json!({"paymentIntent": "pi", "amount": 500})).is_empty());
        assert_eq!(money_amount(&refund, &json!({"amount": 7})), None);
        let email = def(
            json!({"name": "e", "urlTemplate": "https://x.example", "impact": {"dimension": "emails", "amount": "count(input.to)", "bound": "exact"}}),
        );
        assert_eq!(
            quantities(&email, &json!({"to": ["a", "b"]}))[0].amount,
            Some(2)
        );
        assert_eq!(quantities(&email, &json!({}))[0].amount, None);
        let plain = def(json!({"name": "p", "urlTemplate": "https://x.example"}));
        assert!(quantities(&plain, &json!({})).is_empty());
    }
}
