//! Signed receipts (issue #29, item 3): after each settlement of an effect, a receipt signed
//! with Ed25519 over its RFC 8785 form and chained to the environment's previous receipt, so
//! anyone holding the public keys can check offline what was sent, who approved it, which
//! policy decided and what came back (`docs/RECEIPTS.md`).
//!
//! - `build.rs`: which sealed audit events are settlements, and the receipt of one (pure).
//! - `issuer.rs`: the background task that signs and stores them, one per settlement.
//! - `keys.rs`: the signing keys (made at first start, sealed in the vault, rotated).
//!
//! The receipt format and its verification are `steward_core::receipt`; the stored records
//! and the exactly-once rule are `steward_store::Receipts`.

pub(crate) mod build;
pub(crate) mod issuer;
pub mod keys;

#[cfg(test)]
mod tests;
