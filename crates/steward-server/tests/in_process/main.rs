//! In-process tests: the real router, dispatcher and store, with an injectable clock and crash
//! hook, against the real provider fixture.

mod harness;

mod edge;
mod http_idempotent;
mod replay_window;
mod secret_tags;
mod simulation;
mod wal_pages;
