//! Operator commands: a running server's approvals, effects, invocations, actions, kill switch,
//! policy files and webhook dead letters, through its API with an operator key (`--server`/`STEWARD_SERVER`,
//! `STEWARD_API_KEY`), as tables or, with `--json`, the API's JSON.

pub mod actions;
pub mod approvals;
pub mod channels;
pub mod effects;
pub mod environment;
pub mod holds;
pub mod invocations;
pub mod policies;
pub mod webhooks;
