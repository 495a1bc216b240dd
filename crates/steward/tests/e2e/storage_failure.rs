//! A storage failure before dispatch fails closed: an error answer, nothing sent.
//!
//! The data directory sits on a small tmpfs that the test fills, so SQLite's next commit fails
//! with a real "disk full". Mounting needs root (CI runs as root); elsewhere the test says it
//! was skipped.

use crate::harness::*;
use std::process::Command;

struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount_tmpfs(dir: &std::path::Path) -> Option<Mount> {
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then(|| Mount(dir.to_path_buf()))
}

fn fill(dir: &std::path::Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0u8; 64 * 1024];
    while file.write_all(&block).is_ok() {}
    let _ = file.sync_all();
}

#[tokio::test]
async fn a_full_disk_before_dispatch_sends_nothing_and_answers_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = mount_tmpfs(dir.path()) else {
        eprintln!("SKIPPED: cannot mount a tmpfs here (needs root); CI runs this test");
        return;
    };
    let fixture = fixture().await;
    let server = Server::start(&dir.path().join("data"), &["--allow-insecure-destinations"]);
    let operator = Api::new(&server, &server.keys("test", "operator"));
    refund_action(&operator, &fixture.base_url(), "refund").await;
    fill(dir.path());
    let reply = operator
        .invoke("refund", refund_input(1), Some("op-1"), None)
        .await;
    assert_eq!(reply.status, 503, "{:?}", reply.body);
    assert_eq!(reply.code(), "STORAGE_UNAVAILABLE");
    assert_eq!(
        fixture.write_count(),
        0,
        "nothing may be sent when the intent cannot be recorded"
    );
    // Once space is back, the same operation goes through exactly once.
    std::fs::remove_file(dir.path().join("filler")).unwrap();
    let retried = operator
        .invoke("refund", refund_input(1), Some("op-1"), None)
        .await;
    assert_eq!(retried.data()["status"], "succeeded", "{:?}", retried.body);
    assert_eq!(fixture.write_count(), 1);
}
