//! Everything is audited: each event is written with its own hash and sealed into a hash chain
//! by the server, and `steward audit verify` checks both end to end.

use crate::harness::*;
use std::process::Command;

fn verify(data: &std::path::Path) -> (bool, String) {
    let out = Command::new(steward_bin())
        .args(["audit", "verify", "--data"])
        .arg(data)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test]
async fn the_audit_chain_verifies_and_tampering_is_detected() {
    let w = world(&[]).await;
    let reply = w.agent.invoke("refund", refund_input(1), None, None).await;
    assert_eq!(reply.data()["status"], "succeeded");
    let (ok, text) = verify(&w.server.data);
    assert!(ok, "{text}");
    let events: u64 = text
        .split_whitespace()
        .nth(3)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        events >= 8,
        "keys, secret, action, invocation and its transitions are audited: {text}"
    );

    // Every state change names its actor.
    let conn = rusqlite_free_read(&w.server.data);
    assert!(conn.contains("effect.transition"), "{conn}");

    // The server seals every event into the chain in the background, within moments.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let sealed = loop {
        let (ok, text) = verify(&w.server.data);
        assert!(ok, "{text}");
        if text.contains("none unsealed") || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(
        sealed.contains("none unsealed"),
        "the server's sealer seals: {sealed}"
    );

    // Rewrite one sealed event's content behind Steward's back.
    let db = w.server.data.join("steward.db");
    let status = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE audit SET after='{}' WHERE seq=3\"); c.commit()")
        .arg(&db)
        .status()
        .unwrap();
    assert!(status.success());
    let (ok, text) = verify(&w.server.data);
    assert!(!ok, "a tampered chain must fail verification: {text}");
    assert!(text.contains("BROKEN"), "{text}");
}

/// Reads the audit kinds through python's sqlite3 (keeps this test free of a rusqlite dependency).
fn rusqlite_free_read(data: &std::path::Path) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print([r for r in c.execute('SELECT kind, actor FROM audit')])")
        .arg(data.join("steward.db"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}
