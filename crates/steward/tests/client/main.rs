//! The client library and `steward chaos` against real processes: a `steward serve` child per
//! test, the provider fixture counting committed writes, the bundled refund worker. One test
//! binary, one module per concern.

mod harness;

mod chaos;
mod operations;
