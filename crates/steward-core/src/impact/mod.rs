//! Impact: what an action declares it changes, the quantities one invocation carries, and the
//! shared limits those quantities reserve against just before dispatch.
//!
//! ```
//! use serde_json::json;
//! use steward_core::impact::{check, ImpactDeclaration, Usage};
//!
//! let emails = ImpactDeclaration::parse(
//!     &json!({"dimension": "emails", "amount": "count(input.to)", "bound": "exact"}),
//! ).unwrap();
//! let quantity = emails.quantity(&json!({"to": ["a@example.com", "b@example.com"]}));
//! assert_eq!(quantity.amount, Some(2));
//! // A limit of 10 with 9 already consumed has room for 1, not 2.
//! let usage = Usage { consumed: 9, reserved: 0, exposure: 0 };
//! assert!(check(10, usage, &quantity).is_err());
//! ```

mod amount;
mod declaration;
mod limit;

pub use amount::{AmountError, AmountExpr, AMOUNT_EXPRESSION_LEN_MAX};
pub use declaration::{
    is_currency, is_valid_dimension, money_amount, quantities, Bound, ImpactDeclaration, Quantity,
    MONEY, RESOURCE_MUTATIONS,
};
#[cfg(test)]
pub(crate) use limit::reservation_after;
pub use limit::{
    check, check_limit_amount, check_limit_name, LimitSpec, Period, Refusal, ReservationState,
    Usage, LIMIT_AMOUNT_MAX, LIMIT_FIELDS, LIMIT_NAME_LEN_MAX,
};
