//! The `/v1/refunds` API and the control endpoints, without faults.

use reqwest::header::AUTHORIZATION;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn form_create_commits_a_stripe_shaped_refund() {
    let fx = start().await;
    let resp = post_form(&fx, "payment_intent=pi_123&amount=1500", None)
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(!replayed(&resp));
    let r = body(resp).await;
    let id = r["id"].as_str().unwrap();
    assert!(id.starts_with("re_") && id.len() == 27, "{id}");
    assert!(id[3..].chars().all(|c| c.is_ascii_alphanumeric()));
    assert_eq!(r["object"], "refund");
    assert_eq!(r["amount"], 1500);
    assert_eq!(r["currency"], "usd");
    assert_eq!(r["payment_intent"], "pi_123");
    assert_eq!(r["status"], "succeeded");
    assert_eq!(r["metadata"], json!({}));
    assert!(r["created"].as_i64().unwrap() > 1_600_000_000);
    assert!(
        r.get("idempotency_key").is_none(),
        "fixture-only field leaked"
    );
    assert_eq!(fx.write_count(), 1);
    assert_eq!(fx.refunds()[0].id, id);
}

#[tokio::test]
async fn json_create_with_metadata_currency_and_reason() {
    let fx = start().await;
    let resp = post_json(
        &fx,
        &json!({"payment_intent": "pi_json", "amount": 250, "currency": "EUR",
                "metadata": {"order": "o_1", "n": 7}, "reason": "requested_by_customer"}),
        None,
    )
    .await;
    assert_eq!(resp.status(), 200);
    let r = body(resp).await;
    assert_eq!(r["amount"], 250);
    assert_eq!(r["currency"], "eur");
    assert_eq!(r["reason"], "requested_by_customer");
    assert_eq!(r["metadata"], json!({"order": "o_1", "n": "7"}));
    assert_eq!(fx.write_count(), 1);
    assert_eq!(fx.refunds()[0].metadata["order"], "o_1");
}

#[tokio::test]
async fn form_metadata_bracket_keys_become_an_object() {
    let fx = start().await;
    let body_text =
        "payment_intent=pi_m&amount=10&metadata%5Bsteward_run%5D=run_1&metadata[note]=two%20words";
    let resp = post_form(&fx, body_text, None).await.unwrap();
    assert_eq!(resp.status(), 200);
    let r = body(resp).await;
    assert_eq!(
        r["metadata"],
        json!({"steward_run": "run_1", "note": "two words"})
    );
    assert_eq!(fx.refunds()[0].metadata.len(), 2);
}

#[tokio::test]
async fn requests_without_a_test_key_are_refused_and_never_echoed() {
    let fx = start().await;
    let url = format!("{}/v1/refunds", fx.base_url());
    let c = client();

    let none = c.post(&url).body(BASIC).send().await.unwrap();
    assert_eq!(none.status(), 401);
    assert_eq!(body(none).await["error"]["type"], "invalid_request_error");

    for bad in [
        "Bearer sk_live_SECRETlive999",
        "Bearer pk_test_PUBLISHABLE1",
        "Bearer sk_test_",
        "Basic sk_test_abc",
    ] {
        let resp = c
            .post(&url)
            .header(AUTHORIZATION, bad)
            .body(BASIC)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{bad}");
        let text = resp.text().await.unwrap();
        let secret = bad.split(' ').nth(1).unwrap();
        if secret.len() > "sk_test_".len() {
            assert!(!text.contains(secret), "key echoed: {text}");
        }
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }

    let get = c.get(format!("{url}/re_x")).send().await.unwrap();
    assert_eq!(get.status(), 401);

    let rk = c
        .post(&url)
        .header(AUTHORIZATION, "Bearer rk_test_restricted1")
        .body(BASIC)
        .send()
        .await
        .unwrap();
    assert_eq!(rk.status(), 200);
    assert_eq!(fx.write_count(), 1);
}

#[tokio::test]
async fn validation_errors_name_the_param_and_commit_nothing() {
    let fx = start().await;
    let cases = [
        ("amount=500", "payment_intent"),
        ("payment_intent=pi_1", "amount"),
        ("payment_intent=pi_1&amount=0", "amount"),
        ("payment_intent=pi_1&amount=-3", "amount"),
        ("payment_intent=pi_1&amount=12.5", "amount"),
        ("payment_intent=pi_1&amount=lots", "amount"),
        ("payment_intent=pi_1&amount=5&currency=dollars", "currency"),
        ("payment_intent=pi_1&amount=5&reason=bored", "reason"),
        ("payment_intent=pi_1&amount=5&charge=ch_1", "charge"),
        (
            "payment_intent=pi_1&amount=5&metadata[a][b]=1",
            "metadata[a][b]",
        ),
    ];
    for (form, param) in cases {
        let resp = post_form(&fx, form, None).await.unwrap();
        assert_eq!(resp.status(), 400, "{form}");
        let e = body(resp).await;
        assert_eq!(e["error"]["type"], "invalid_request_error", "{form}");
        assert_eq!(e["error"]["param"], param, "{form}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(param),
            "{form}: {e}"
        );
    }
    let bad_json = client()
        .post(format!("{}/v1/refunds", fx.base_url()))
        .header(AUTHORIZATION, format!("Bearer {API_KEY}"))
        .header("content-type", "application/json")
        .body("{\"payment_intent\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_json.status(), 400);
    assert_eq!(
        body(bad_json).await["error"]["type"],
        "invalid_request_error"
    );
    let bad_utf8 = client()
        .post(format!("{}/v1/refunds", fx.base_url()))
        .header(AUTHORIZATION, format!("Bearer {API_KEY}"))
        .body(vec![0xffu8, 0xfe, b'=', 0x80])
        .send()
        .await
        .unwrap();
    assert_eq!(bad_utf8.status(), 400);
    assert_eq!(fx.write_count(), 0);
}

#[tokio::test]
async fn retrieve_by_id_and_404_for_unknown() {
    let fx = start().await;
    let created = body(post_form(&fx, BASIC, None).await.unwrap()).await;
    let id = created["id"].as_str().unwrap();
    let resp = get(&fx, &format!("/v1/refunds/{id}")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(body(resp).await, created);

    let missing = get(&fx, "/v1/refunds/re_doesnotexist").await;
    assert_eq!(missing.status(), 404);
    let e = body(missing).await;
    assert_eq!(e["error"]["code"], "resource_missing");
    assert_eq!(e["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn list_filters_by_payment_intent_newest_first() {
    let fx = start().await;
    let a1 = body(
        post_form(&fx, "payment_intent=pi_a&amount=1", None)
            .await
            .unwrap(),
    )
    .await;
    let _b = body(
        post_form(&fx, "payment_intent=pi_b&amount=2", None)
            .await
            .unwrap(),
    )
    .await;
    let a2 = body(
        post_form(&fx, "payment_intent=pi_a&amount=3", None)
            .await
            .unwrap(),
    )
    .await;

    let list = body(get(&fx, "/v1/refunds?payment_intent=pi_a&limit=10").await).await;
    assert_eq!(list["object"], "list");
    assert_eq!(list["url"], "/v1/refunds");
    assert_eq!(list["has_more"], false);
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[0]["id"], a2["id"]);
    assert_eq!(data[1]["id"], a1["id"]);

    let page = body(get(&fx, "/v1/refunds?payment_intent=pi_a&limit=1").await).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    assert_eq!(page["data"][0]["id"], a2["id"]);
    assert_eq!(page["has_more"], true);

    let all = body(get(&fx, "/v1/refunds").await).await;
    assert_eq!(all["data"].as_array().unwrap().len(), 3);

    let none = body(get(&fx, "/v1/refunds?payment_intent=pi_zzz").await).await;
    assert_eq!(none["data"], json!([]));

    let bad = get(&fx, "/v1/refunds?limit=0").await;
    assert_eq!(bad.status(), 400);
    assert_eq!(body(bad).await["error"]["param"], "limit");
}

#[tokio::test]
async fn control_endpoints_report_writes_health_and_reset() {
    let fx = start().await;
    let c = client();
    let base = fx.base_url();
    let health = c
        .get(format!("{base}/_fixture/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    let r = body(post_form(&fx, BASIC, Some("k-ctl")).await.unwrap()).await;
    let writes = body(
        c.get(format!("{base}/_fixture/writes"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(writes["total"], 1);
    assert_eq!(writes["writes"][0]["id"], r["id"]);
    assert_eq!(writes["writes"][0]["idempotency_key"], "k-ctl");

    let reset = c
        .post(format!("{base}/_fixture/reset"))
        .send()
        .await
        .unwrap();
    assert_eq!(reset.status(), 200);
    assert_eq!(fx.write_count(), 0);
    // The key is forgotten too: the same request writes anew.
    let again = post_form(&fx, BASIC, Some("k-ctl")).await.unwrap();
    assert!(!replayed(&again));
    assert_ne!(body(again).await["id"], r["id"]);
    assert_eq!(fx.write_count(), 1);

    let unknown = get(&fx, "/v1/charges").await;
    assert_eq!(unknown.status(), 404);
    assert_eq!(
        body(unknown).await["error"]["type"],
        "invalid_request_error"
    );
}
