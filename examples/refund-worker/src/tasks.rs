//! Refund tasks: a JSON list of `{"orderId", "paymentIntent", "amount"}`.

use anyhow::{bail, Context};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;
use steward_core::OperationKey;

/// The prefix of every refund's operation key; the rest is the order id.
pub const OPERATION_KEY_PREFIX: &str = "refund:";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Task {
    pub order_id: String,
    pub payment_intent: String,
    /// Minor units (cents).
    pub amount: i64,
}

impl Task {
    /// The stable business key: one refund per order, ever.
    pub fn operation_key(&self) -> anyhow::Result<OperationKey> {
        OperationKey::parse(&format!("{OPERATION_KEY_PREFIX}{}", self.order_id)).with_context(
            || {
                format!(
                    "order id {:?} does not make an operation key",
                    self.order_id
                )
            },
        )
    }

    /// The `stripe.refund` input.
    pub fn input(&self) -> Value {
        json!({ "paymentIntent": self.payment_intent, "amount": self.amount })
    }
}

/// The order an operation key names, if it is a refund key.
pub fn order_of(operation_key: &OperationKey) -> Option<&str> {
    operation_key.as_str().strip_prefix(OPERATION_KEY_PREFIX)
}

pub fn load(path: &Path) -> anyhow::Result<Vec<Task>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the tasks file {}", path.display()))?;
    let tasks: Vec<Task> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON list of refund tasks", path.display()))?;
    let mut orders: Vec<&str> = tasks.iter().map(|t| t.order_id.as_str()).collect();
    orders.sort_unstable();
    if let Some(w) = orders.windows(2).find(|w| w[0] == w[1]) {
        bail!("order {} appears twice in {}", w[0], path.display());
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_parse_and_duplicates_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.json");
        std::fs::write(
            &path,
            r#"[{"orderId": "o-1", "paymentIntent": "pi_1", "amount": 500}]"#,
        )
        .unwrap();
        let tasks = load(&path).unwrap();
        assert_eq!(tasks[0].operation_key().unwrap().as_str(), "refund:o-1");
        assert_eq!(order_of(&tasks[0].operation_key().unwrap()), Some("o-1"));
        assert_eq!(
            tasks[0].input(),
            json!({"paymentIntent": "pi_1", "amount": 500})
        );
        std::fs::write(
            &path,
            r#"[{"orderId": "o-1", "paymentIntent": "pi_1", "amount": 5},
                {"orderId": "o-1", "paymentIntent": "pi_2", "amount": 6}]"#,
        )
        .unwrap();
        assert!(load(&path).is_err());
    }
}
