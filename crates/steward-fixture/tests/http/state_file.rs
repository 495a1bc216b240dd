//! Durable state across a restart of the fixture itself.

use crate::common::*;

#[tokio::test]
async fn writes_and_replays_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixture-state.json");

    let fx = start_with(Some(path.clone())).await;
    let first = body(post_form(&fx, BASIC, Some("key-durable")).await.unwrap()).await;
    let rejected = post_form(&fx, "payment_intent=pi_bad", Some("key-invalid"))
        .await
        .unwrap();
    assert_eq!(rejected.status(), 400);
    assert_eq!(fx.write_count(), 1);
    fx.shutdown().await;
    assert!(path.exists());

    let fx = start_with(Some(path.clone())).await;
    assert_eq!(fx.write_count(), 1);
    assert_eq!(fx.refunds()[0].id, first["id"].as_str().unwrap());
    assert_eq!(
        fx.refunds()[0].idempotency_key.as_deref(),
        Some("key-durable")
    );

    let replay = post_form(&fx, BASIC, Some("key-durable")).await.unwrap();
    assert_eq!(replay.status(), 200);
    assert!(replayed(&replay));
    assert_eq!(body(replay).await["id"], first["id"]);
    let replay_400 = post_form(&fx, "payment_intent=pi_bad", Some("key-invalid"))
        .await
        .unwrap();
    assert_eq!(replay_400.status(), 400);
    assert!(replayed(&replay_400));
    assert_eq!(fx.write_count(), 1);

    let fetched = get(
        &fx,
        &format!("/v1/refunds/{}", first["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(body(fetched).await, first);

    // Reset clears the file too.
    fx.reset();
    assert_eq!(fx.write_count(), 0);
    assert!(!path.exists());
    fx.shutdown().await;

    let fx = start_with(Some(path.clone())).await;
    assert_eq!(fx.write_count(), 0);
    fx.shutdown().await;
}

#[tokio::test]
async fn committed_writes_are_on_disk_before_the_response() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let fx = start_with(Some(path.clone())).await;
    let r = body(post_form(&fx, BASIC, None).await.unwrap()).await;
    // No shutdown: the file already holds the refund.
    let on_disk: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(on_disk["refunds"][0]["id"], r["id"]);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "state.json")
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
}

#[tokio::test]
async fn a_corrupt_state_file_is_an_error_not_an_empty_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    std::fs::write(&path, b"{ not json").unwrap();
    let result = steward_fixture::spawn(steward_fixture::FixtureConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state_file: Some(path),
    })
    .await;
    assert!(result.is_err());
}
