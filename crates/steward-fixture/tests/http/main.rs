//! End-to-end tests: real HTTP on 127.0.0.1, ephemeral ports.

mod common;
mod faults;
mod generic;
mod idempotency;
mod refunds;
mod state_file;
