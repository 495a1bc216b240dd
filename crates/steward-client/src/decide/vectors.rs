//! The recovery decision as shared test vectors: `tests/vectors/recovery-decisions.json`, one
//! vector per `(local state, server view)` pair this crate's table test walks, read by this
//! test and by the Python package's (`tests/python/test_recovery_decisions.py`), so both
//! languages decide alike.
//!
//! The file is generated from [`decide`]: `STEWARD_WRITE_VECTORS=1 cargo test -p steward-client
//! decide::vectors` rewrites it; without the variable the test fails when the file and the table
//! differ. Bump [`VECTORS_VERSION`] whenever a decision changes meaning, so a consumer pinned to
//! an older file notices.

use super::{decide, Contradiction, RecoveryAction, ServerView};
use crate::state::LocalState;
use serde_json::{json, Value};
use steward_core::InvocationStatus;

/// The vectors' format and meaning. Bumped when a decision changes or the format does.
const VECTORS_VERSION: u64 = 1;

/// The committed file, relative to this crate.
const VECTORS_PATH: &str = "../../tests/vectors/recovery-decisions.json";
const VECTORS: &str = include_str!("../../../../tests/vectors/recovery-decisions.json");

fn view_json(view: ServerView) -> Value {
    match view {
        ServerView::NoInvocationKnown => json!({"view": "no_invocation_known"}),
        ServerView::NotFound => json!({"view": "not_found"}),
        ServerView::Status(s) => json!({"view": "status", "status": s.as_str()}),
    }
}

fn action_json(action: RecoveryAction) -> Value {
    match action {
        RecoveryAction::Dispatch => json!({"kind": "dispatch"}),
        RecoveryAction::Adopt(s) => json!({"kind": "adopt", "status": s.as_str()}),
        RecoveryAction::ObserveApproval => json!({"kind": "observe_approval"}),
        RecoveryAction::AwaitSettlement => json!({"kind": "await_settlement"}),
        RecoveryAction::AssignReconciliation => json!({"kind": "assign_reconciliation"}),
        RecoveryAction::Complete => json!({"kind": "complete"}),
        RecoveryAction::Continue => json!({"kind": "continue"}),
        RecoveryAction::Surface => json!({"kind": "surface"}),
        RecoveryAction::Done => json!({"kind": "done"}),
        RecoveryAction::Escalate(c) => json!({"kind": "escalate", "contradiction": c.as_str()}),
    }
}

fn parse_view(v: &Value) -> ServerView {
    match v["view"].as_str() {
        Some("no_invocation_known") => ServerView::NoInvocationKnown,
        Some("not_found") => ServerView::NotFound,
        Some("status") => ServerView::Status(status(&v["status"])),
        other => panic!("unknown server view {other:?} in {v}"),
    }
}

fn status(v: &Value) -> InvocationStatus {
    v.as_str()
        .and_then(InvocationStatus::parse)
        .unwrap_or_else(|| panic!("unknown invocation status {v}"))
}

fn parse_action(v: &Value) -> RecoveryAction {
    let contradiction = |v: &Value| {
        [
            Contradiction::InvocationMissing,
            Contradiction::NoInvocationRecorded,
            Contradiction::StatusDisagrees,
        ]
        .into_iter()
        .find(|c| Some(c.as_str()) == v.as_str())
        .unwrap_or_else(|| panic!("unknown contradiction {v}"))
    };
    match v["kind"].as_str() {
        Some("dispatch") => RecoveryAction::Dispatch,
        Some("adopt") => RecoveryAction::Adopt(status(&v["status"])),
        Some("observe_approval") => RecoveryAction::ObserveApproval,
        Some("await_settlement") => RecoveryAction::AwaitSettlement,
        Some("assign_reconciliation") => RecoveryAction::AssignReconciliation,
        Some("complete") => RecoveryAction::Complete,
        Some("continue") => RecoveryAction::Continue,
        Some("surface") => RecoveryAction::Surface,
        Some("done") => RecoveryAction::Done,
        Some("escalate") => RecoveryAction::Escalate(contradiction(&v["contradiction"])),
        other => panic!("unknown action kind {other:?} in {v}"),
    }
}

/// The file's text, from the table: a header, then one vector per line (small diffs).
fn render() -> String {
    let mut lines = vec![];
    for local in LocalState::ALL {
        for view in ServerView::ALL {
            let vector = json!({
                "local": local.as_str(),
                "server": view_json(view),
                "action": action_json(decide(local, view)),
            });
            lines.push(format!("    {vector}"));
        }
    }
    let states: Vec<&str> = LocalState::ALL.iter().map(|s| s.as_str()).collect();
    let views: Vec<Value> = ServerView::ALL.into_iter().map(view_json).collect();
    format!(
        "{{\n  \"version\": {VECTORS_VERSION},\n  \"about\": {},\n  \"local_states\": {},\n  \
         \"server_views\": {},\n  \"vectors\": [\n{}\n  ]\n}}\n",
        json!(
            "decide(local state, server view) -> recovery action, for every pair. Generated \
             from crates/steward-client/src/decide.rs by STEWARD_WRITE_VECTORS=1 cargo test -p \
             steward-client decide::vectors; do not edit by hand."
        ),
        json!(states),
        json!(views),
        lines.join(",\n")
    )
}

#[test]
fn the_shared_vectors_file_is_generated_from_the_table() {
    let fresh = render();
    if std::env::var_os("STEWARD_WRITE_VECTORS").is_some() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(VECTORS_PATH);
        std::fs::write(&path, &fresh).expect("writing the vectors file");
        return;
    }
    assert!(
        VECTORS == fresh,
        "tests/vectors/recovery-decisions.json differs from the decide table; regenerate it \
         with STEWARD_WRITE_VECTORS=1 cargo test -p steward-client decide::vectors (and bump \
         VECTORS_VERSION if a decision changed)"
    );
}

#[test]
fn decide_passes_every_shared_vector() {
    let file: Value = serde_json::from_str(VECTORS).expect("the vectors file is JSON");
    assert_eq!(file["version"], json!(VECTORS_VERSION), "vectors version");
    let vectors = file["vectors"].as_array().expect("a list of vectors");
    let mut pairs = std::collections::HashSet::new();
    for v in vectors {
        let local = v["local"]
            .as_str()
            .and_then(LocalState::parse)
            .unwrap_or_else(|| panic!("unknown local state in {v}"));
        let view = parse_view(&v["server"]);
        assert!(pairs.insert((local, view)), "a pair twice: {v}");
        assert_eq!(
            decide(local, view),
            parse_action(&v["action"]),
            "decide({local:?}, {view:?}) against the vector {v}"
        );
    }
    assert_eq!(
        pairs.len(),
        LocalState::ALL.len() * ServerView::ALL.len(),
        "every pair of the table test has a vector"
    );
}
