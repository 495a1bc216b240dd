//! The storage contract, in parts by concern. Every method is one transaction: when it returns
//! `Ok`, the change is committed and durable (fsync'd) and will be found on restart; when it
//! returns `Err`, nothing of it was committed. Every state change appends its audit event in the
//! same transaction.
//!
//! Each part is a trait of its own, in a file of its own: [`Identity`], [`Catalog`],
//! [`Effects`], [`Idempotency`], [`Approvals`], [`Policies`], [`Limits`], [`KillSwitch`], [`Holds`],
//! [`Replicas`], [`AuditLog`], [`Budgets`], [`Connections`], [`Previews`], [`Receipts`], [`Runs`],
//! [`Webhooks`] and [`Figures`]. [`Store`] is all of them at once: what a server holds (`Arc<dyn Store>`), and
//! what a backend is. A function that needs one part takes that part
//! (`&dyn Catalog`), and a `&dyn Store` coerces to it.

mod approvals;
mod audit_log;
mod budgets;
mod catalog;
mod connections;
mod effects;
mod figures;
mod holds;
mod idempotency;
mod identity;
mod kill_switch;
mod limits;
mod policies;
mod previews;
mod receipts;
mod replicas;
mod runs;
mod webhooks;

pub use approvals::Approvals;
pub use audit_log::AuditLog;
pub use budgets::Budgets;
pub use catalog::Catalog;
pub use connections::Connections;
pub use effects::Effects;
pub(crate) use figures::overdue_ms;
pub use figures::{Figures, OperatingFigures, PoolUse, DEAD_LETTERS_COUNTED_MAX};
pub use holds::Holds;
pub(crate) use idempotency::seen_before;
pub use idempotency::Idempotency;
pub use identity::Identity;
pub use kill_switch::{HaltChange, KillSwitch, UnkeyedChange};
pub use limits::Limits;
pub use policies::Policies;
pub use previews::Previews;
pub use receipts::Receipts;
pub use replicas::{Heartbeat, Replicas};
pub use runs::Runs;
pub use webhooks::{
    DeadLetter, DeliveryOutcome, Redelivery, RedeliveryTarget, SealedSecret, WebhookBacklog,
    WebhookSubscription, Webhooks, WEBHOOK_BACKLOG_SCAN_EVENTS_MAX,
};

/// The whole store: every part. Implemented for every type that implements all of them, so a
/// backend implements the parts and never this.
pub trait Store:
    Identity
    + Catalog
    + Effects
    + Idempotency
    + Approvals
    + Policies
    + Previews
    + Receipts
    + Limits
    + KillSwitch
    + Holds
    + Replicas
    + AuditLog
    + Budgets
    + Connections
    + Webhooks
    + Runs
    + Figures
    + 'static
{
}

impl<T> Store for T where
    T: Identity
        + Catalog
        + Effects
        + Idempotency
        + Approvals
        + Policies
        + Previews
        + Receipts
        + Limits
        + KillSwitch
        + Holds
        + Replicas
        + AuditLog
        + Budgets
        + Connections
        + Webhooks
        + Runs
        + Figures
        + 'static
{
}
