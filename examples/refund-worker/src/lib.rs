//! # steward-refund-worker
//!
//! A small agent-side worker built on `steward-client`, and the worker `steward chaos` drives by
//! default. It takes refund tasks from a JSON file and runs each as one business operation:
//!
//! 1. `begin` the operation `refund:<orderId>` with the `stripe.refund` input (journaled and
//!    fsync'd before anything is sent);
//! 2. `run` it against the `refund-order` action;
//! 3. `complete` it (the final local save);
//! 4. run the continuation: mark the order in the worker's own table and queue one customer
//!    notification in an outbox (both idempotent, so the `after_save` window is real and safe);
//! 5. `mark_continued`.
//!
//! On start it first `recover`s whatever a previous run left.

mod orders;
mod tasks;
mod worker;

pub use orders::{Orders, Outcome, SCHEMA as ORDERS_SCHEMA};
pub use tasks::{load as load_tasks, order_of, Task, OPERATION_KEY_PREFIX};
pub use worker::{run, Args};
