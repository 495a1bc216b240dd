//! End-to-end tests: real `steward serve` processes on loopback, the provider fixture counting
//! committed writes, SIGKILL for crashes. One test binary, one module per concern.

mod harness;

mod adapters;
mod approvals;
mod audit;
mod backup;
mod batch_crash;
mod boundary;
mod crash;
mod exactly_once;
mod failover;
mod faults;
mod halt;
mod holds;
mod input_edits;
mod isolation;
mod keys;
mod limits;
mod logs;
mod metrics;
mod operator_cli;
mod outcomes;
mod policies;
mod postgres;
mod protective_defaults;
mod recovery;
mod replicas;
mod secrets;
mod shadow_policies;
mod shutdown;
mod storage_failure;
mod store_lifecycle;
mod transport;
