//! `steward backup` of a live embedded store: taken while invokes keep arriving, it restores to
//! a server whose audit chain verifies and which holds every invoke acknowledged before the
//! backup started, as it was acknowledged.

use crate::harness::*;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Clients invoking at once during the backup.
const LOAD_CLIENTS: usize = 4;
/// Invokes acknowledged before the backup starts, and again after it ends, at least: the copy
/// is taken in the middle of the load.
const ACKNOWLEDGED_AROUND_BACKUP_MIN: usize = 20;
/// How long the load may take to reach either count.
const LOAD_WAIT: Duration = Duration::from_secs(60);

/// One acknowledged invoke: its invocation id, its status, and when its answer arrived.
#[derive(Debug, Clone)]
struct Acknowledged {
    id: String,
    status: String,
    at: Instant,
}

/// Invokes `refund` with fresh operation keys until `stop`, recording every 200 answer.
async fn load(
    agent: Api,
    client: usize,
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<Acknowledged>>>,
) {
    let mut n = 0u32;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let key = format!("backup-load-{client}-{n}");
        let reply = agent
            .invoke(
                "refund",
                refund_input(client as u32 * 100_000 + n),
                Some(&key),
                None,
            )
            .await;
        let at = Instant::now();
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        acks.lock().unwrap().push(Acknowledged {
            id: reply.data()["id"].as_str().unwrap().to_string(),
            status: reply.data()["status"].as_str().unwrap().to_string(),
            at,
        });
    }
}

async fn until_acknowledged(acks: &Mutex<Vec<Acknowledged>>, count: usize) {
    let started = Instant::now();
    while acks.lock().unwrap().len() < count {
        assert!(started.elapsed() < LOAD_WAIT, "the load stalled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A data directory made of a backup and the master key, the way docs/OPERATING.md restores.
fn restore(backup: &Path, master_key: &Path, into: &Path) {
    std::fs::create_dir(into).unwrap();
    std::fs::copy(backup, into.join(steward_server::DATABASE_FILE)).unwrap();
    std::fs::copy(master_key, into.join(steward_server::MASTER_KEY_FILE)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_load_restores_to_a_verified_server_holding_every_acknowledged_invoke() {
    let w = world(&[]).await;
    // A key made before the backup: the copy holds it too.
    let operator_token = w.server.keys("test", "operator");
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..LOAD_CLIENTS)
        .map(|c| tokio::spawn(load(w.agent.clone(), c, stop.clone(), acks.clone())))
        .collect();
    until_acknowledged(&acks, ACKNOWLEDGED_AROUND_BACKUP_MIN).await;

    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("steward-backup.db");
    let started = Instant::now();
    let out = {
        let (data, copy) = (w.server.data.clone(), copy.clone());
        tokio::task::spawn_blocking(move || {
            Command::new(steward_bin())
                .args(["backup", "--data"])
                .arg(&data)
                .arg("--out")
                .arg(&copy)
                .output()
                .expect("steward backup runs")
        })
        .await
        .unwrap()
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "backup failed: {stderr}");
    assert!(stderr.contains("master key is not in it"), "{stderr}");
    let before: Vec<Acknowledged> = acks
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a.at < started)
        .cloned()
        .collect();
    // The load went on past the backup: it was taken from a store being written.
    let count_at_end = acks.lock().unwrap().len();
    until_acknowledged(&acks, count_at_end + ACKNOWLEDGED_AROUND_BACKUP_MIN).await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.unwrap();
    }
    assert!(before.len() >= ACKNOWLEDGED_AROUND_BACKUP_MIN);

    let restored = dir.path().join("restored");
    restore(
        &copy,
        &w.server.data.join(steward_server::MASTER_KEY_FILE),
        &restored,
    );
    let server = Server::start(&restored, &["--allow-insecure-destinations"]);
    let audit = Command::new(steward_bin())
        .args(["audit", "verify", "--data"])
        .arg(&restored)
        .output()
        .expect("audit verify runs");
    let verified = String::from_utf8_lossy(&audit.stdout);
    assert!(audit.status.success(), "{verified}");
    assert!(verified.contains("audit chain intact"), "{verified}");

    let operator = Api::new(&server, &operator_token);
    let mut missing = Vec::new();
    for ack in &before {
        let read = operator
            .get(&format!("/actions/invocations/{}", ack.id))
            .await;
        if read.status != 200 || read.data()["status"] != ack.status.as_str() {
            missing.push(format!(
                "{} ({}): {} {:?}",
                ack.id, ack.status, read.status, read.body
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} invokes acknowledged before the backup are not in it as acknowledged:\n{}",
        missing.len(),
        before.len(),
        missing.join("\n")
    );
}
