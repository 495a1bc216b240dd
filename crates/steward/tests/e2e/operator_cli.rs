//! The operator commands against a real server: approve, list the unknown queue, reconcile,
//! resolve, halt and hold through `steward approvals|effects|invocations|actions|environment|holds`, with
//! the provider's writes counted at the fixture and `--json` parsed.

use crate::approvals::gated_world;
use crate::harness::*;
use serde_json::Value;
use steward_fixture::{FaultMode, FaultPlan};

/// What one run of the CLI printed.
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        assert!(self.ok, "the command failed: {}", self.stderr);
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("--json output does not parse ({e}): {}", self.stdout))
    }
}

/// Runs `steward ARGS` against `server` with `key`, as an operator would from a terminal.
async fn cli(server: &Server, key: &str, args: &[&str]) -> Ran {
    cli_at(&server.url, key, args).await
}

/// Runs `steward ARGS` against the server at `url` with `key`.
async fn cli_at(url: &str, key: &str, args: &[&str]) -> Ran {
    let out = tokio::process::Command::new(steward_bin())
        .args(args)
        .env("STEWARD_SERVER", url)
        .env("STEWARD_API_KEY", key)
        .env_remove("STEWARD_DATA")
        .output()
        .await
        .expect("the CLI runs");
    Ran {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_approves_from_the_cli_and_the_call_runs_once_but_never_by_its_requester() {
    let w = gated_world(&[]).await;
    let (agent_key, operator_key) = (
        w.server.keys("test", "agent"),
        w.server.keys("test", "operator"),
    );
    let agent = Api::new(&w.server, &agent_key);
    let parked = agent
        .invoke("refund", refund_input(1), Some("cli-1"), None)
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    let approval = parked.data()["approvalId"].as_str().unwrap().to_string();

    let listed = cli(&w.server, &operator_key, &["approvals", "list", "--json"])
        .await
        .json();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![approval.as_str()]);
    let table = cli(&w.server, &operator_key, &["approvals", "list"]).await;
    assert!(
        table.ok && table.stdout.starts_with("ID "),
        "{}",
        table.stdout
    );
    assert!(
        table.stdout.contains(&approval) && table.stdout.contains("0/1"),
        "{}",
        table.stdout
    );

    // The key that asked cannot decide; nothing runs.
    let own = cli(&w.server, &agent_key, &["approvals", "approve", &approval]).await;
    assert!(
        !own.ok,
        "the requester approved its own call: {}",
        own.stdout
    );
    assert!(own.stderr.contains("HTTP 403"), "{}", own.stderr);
    assert_eq!(w.fixture.write_count(), 0);

    let approved = cli(
        &w.server,
        &operator_key,
        &[
            "approvals",
            "approve",
            &approval,
            "--note",
            "checked",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(approved["status"], "approved", "{approved}");
    assert_eq!(approved["decisions"][0]["note"], "checked");
    assert!(
        eventually(std::time::Duration::from_secs(20), || w
            .fixture
            .write_count()
            == 1)
        .await
    );
    // Deciding again (the same person, or a denial after the fact) dispatches nothing more.
    let _ = cli(
        &w.server,
        &operator_key,
        &["approvals", "approve", &approval],
    )
    .await;
    let late = cli(&w.server, &operator_key, &["approvals", "deny", &approval]).await;
    assert!(
        !late.ok,
        "a denial after approval was accepted: {}",
        late.stdout
    );
    assert!(
        late.stderr
            .contains("already approved; your deny changed nothing"),
        "{}",
        late.stderr
    );
    assert_eq!(w.fixture.write_count(), 1, "approved once, dispatched once");

    let shown = cli(&w.server, &operator_key, &["approvals", "show", &approval]).await;
    assert!(
        shown.ok && shown.stdout.contains("approved") && shown.stdout.contains("checked"),
        "{}",
        shown.stdout
    );
    let invocations = cli(&w.server, &operator_key, &["invocations", "list", "--json"])
        .await
        .json();
    assert_eq!(invocations[0]["status"], "succeeded", "{invocations}");
    let actions = cli(&w.server, &operator_key, &["actions", "list", "--json"])
        .await
        .json();
    assert_eq!(actions[0]["name"], "refund");
    let action = cli(&w.server, &operator_key, &["actions", "show", "refund"]).await;
    assert!(
        action.ok && action.stdout.contains("VERSION"),
        "{}",
        action.stdout
    );
}

/// Every key id an answer names is printed with its name beside it, as the view carries it: the
/// operator's on its decision, and the requester (another key) too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_an_answer_names_is_named_beside_its_id() {
    let w = gated_world(&[]).await;
    let (agent_key, operator_key) = (
        w.server.keys("test", "agent"),
        w.server.keys("test", "operator"),
    );
    let agent = Api::new(&w.server, &agent_key);
    let parked = agent
        .invoke("refund", refund_input(1), Some("cli-named"), None)
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    let approval = parked.data()["approvalId"].as_str().unwrap().to_string();
    let identity = |key: &str| {
        let api = Api::new(&w.server, key);
        async move { api.get("/auth/identity").await.data().clone() }
    };
    let (me, requester) = (identity(&operator_key).await, identity(&agent_key).await);
    let (my_id, my_name) = (
        me["apiKeyId"].as_str().unwrap().to_string(),
        me["name"].as_str().unwrap().to_string(),
    );
    let (requester_id, requester_name) = (
        requester["apiKeyId"].as_str().unwrap().to_string(),
        requester["name"].as_str().unwrap().to_string(),
    );

    let approved = cli(
        &w.server,
        &operator_key,
        &["approvals", "approve", &approval, "--note", "named"],
    )
    .await;
    assert!(approved.ok, "{}{}", approved.stdout, approved.stderr);
    let named = format!("{my_id} ({my_name})");
    assert!(
        approved.stdout.contains(&named),
        "no {named:?} in {}",
        approved.stdout
    );
    let requested = approved
        .stdout
        .lines()
        .find(|l| l.starts_with("requested by:"))
        .unwrap_or_default()
        .to_string();
    assert!(
        requested
            .trim_end()
            .ends_with(&format!("{requester_id} ({requester_name})")),
        "the requester is named beside its id: {requested:?}"
    );
    // `--json` is the API's JSON, names and all.
    let json = cli(
        &w.server,
        &operator_key,
        &["approvals", "show", &approval, "--json"],
    )
    .await
    .json();
    assert_eq!(json["decisions"][0]["keyId"], my_id.as_str());
    assert_eq!(json["decisions"][0]["keyName"], my_name.as_str());
    assert_eq!(json["requestedByName"], requester_name.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unknown_queue_is_listed_reconciled_and_resolved_from_the_cli_without_a_resend() {
    let w = world(&[]).await;
    let operator_key = w.server.keys("test", "operator");
    let mut unknown = Vec::new();
    for n in 1..=2 {
        w.fixture
            .set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
        let inv = w
            .agent
            .invoke("refund", refund_input(n), Some(&format!("cli-u{n}")), None)
            .await;
        assert_eq!(inv.data()["status"], "unknown", "{:?}", inv.body);
        unknown.push(inv.data()["effectId"].as_str().unwrap().to_string());
    }
    assert_eq!(w.fixture.write_count(), 2);

    let queue = cli(
        &w.server,
        &operator_key,
        &["effects", "list", "--unresolved", "--json"],
    )
    .await
    .json();
    let mut queued: Vec<String> = queue
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    queued.sort();
    let mut expected = unknown.clone();
    expected.sort();
    assert_eq!(queued, expected);

    let reconciled = cli(
        &w.server,
        &operator_key,
        &["effects", "reconcile", &unknown[0], "--json"],
    )
    .await
    .json();
    assert_eq!(reconciled["outcome"], "succeeded", "{reconciled}");
    assert_eq!(w.fixture.write_count(), 2, "a reconcile only reads");

    let resolved = cli(
        &w.server,
        &operator_key,
        &[
            "effects",
            "resolve",
            &unknown[1],
            "--outcome",
            "succeeded",
            "--reason",
            "seen in the provider's dashboard",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(resolved["outcome"], "succeeded", "{resolved}");
    let operator_id = Api::new(&w.server, &operator_key)
        .get("/auth/identity")
        .await
        .data()["apiKeyId"]
        .clone();
    let last = resolved["evidence"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["kind"], "manual_resolution");
    assert_eq!(
        last["actorKeyId"], operator_id,
        "attributed to the operator who resolved it"
    );
    assert_eq!(w.fixture.write_count(), 2, "resolving sends nothing");
    let shown = cli(&w.server, &operator_key, &["effects", "show", &unknown[1]]).await;
    assert!(
        shown.ok && shown.stdout.contains("manual_resolution"),
        "{}",
        shown.stdout
    );
    let left = cli(
        &w.server,
        &operator_key,
        &["effects", "list", "--unresolved"],
    )
    .await;
    assert!(left.ok && left.stdout.contains("(none)"), "{}", left.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_from_the_cli_stops_the_next_call_until_resume() {
    let w = world(&[]).await;
    let operator_key = w.server.keys("test", "operator");
    let halted = cli(
        &w.server,
        &operator_key,
        &["environment", "halt", "--reason", "incident 42", "--json"],
    )
    .await
    .json();
    assert_eq!(halted["halted"], true);
    assert_eq!(halted["haltReason"], "incident 42");
    let refused = w
        .agent
        .invoke("refund", refund_input(1), Some("cli-h"), None)
        .await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(refused.code(), "environment_halted");
    let shown = cli(&w.server, &operator_key, &["environment", "show"]).await;
    assert!(
        shown.ok && shown.stdout.contains("incident 42"),
        "{}",
        shown.stdout
    );
    let resumed = cli(
        &w.server,
        &operator_key,
        &["environment", "resume", "--json"],
    )
    .await
    .json();
    assert_eq!(resumed["halted"], false);
    let ran = w
        .agent
        .invoke("refund", refund_input(1), Some("cli-h"), None)
        .await;
    assert_eq!(ran.data()["status"], "succeeded", "{:?}", ran.body);
    assert_eq!(w.fixture.write_count(), 1);
    // Without a key the CLI says what to set.
    let no_key = cli(&w.server, "", &["environment", "show"]).await;
    assert!(
        !no_key.ok && no_key.stderr.contains("STEWARD_API_KEY"),
        "{}",
        no_key.stderr
    );
}

/// `steward holds add|list|release`: a held key parks the next call (nothing sent), the table
/// names the hold, and release runs the parked call once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_from_the_cli_parks_one_key_until_release_runs_it_once() {
    let w = world(&[]).await;
    let operator_key = w.server.keys("test", "operator");
    let held = cli(
        &w.server,
        &operator_key,
        &[
            "holds",
            "add",
            "--operation-key",
            "cli-held",
            "--reason",
            "incident 9",
            "--json",
        ],
    )
    .await
    .json();
    let id = held["id"].as_str().expect("a hold id").to_string();
    let parked = w
        .agent
        .invoke("refund", refund_input(1), Some("cli-held"), None)
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    assert_eq!(parked.data()["held"]["holdId"], id.as_str());
    let listed = cli(&w.server, &operator_key, &["holds", "list"]).await;
    assert!(
        listed.ok && listed.stdout.contains(&id) && listed.stdout.contains("incident 9"),
        "{}",
        listed.stdout
    );
    let nothing = cli(&w.server, &operator_key, &["holds", "add"]).await;
    assert!(
        !nothing.ok && nothing.stderr.contains("--operation-key"),
        "{}",
        nothing.stderr
    );
    assert_eq!(w.fixture.write_count(), 0, "nothing is sent while held");
    let released = cli(
        &w.server,
        &operator_key,
        &["holds", "release", &id, "--json"],
    )
    .await
    .json();
    assert_eq!(released["released"], 1);
    let fixture = &w.fixture;
    assert!(
        eventually(std::time::Duration::from_secs(10), || fixture.write_count()
            == 1)
        .await,
        "the held call runs once after release"
    );
}

/// Policy as a file under review: `plan` changes nothing and prints a digest, `test` decides
/// cases and writes nothing, `apply --digest` makes exactly the planned change, and a plan that
/// another edit overtook is refused whole with `STALE_PLAN`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_file_is_planned_tested_and_applied_exactly_from_the_cli() {
    let w = world(&[]).await;
    let operator_key = w.server.keys("test", "operator");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("policies.yaml");
    std::fs::write(
        &file,
        "policies:
  - name: big refunds need two
    matchKind: action
    matchActionName: refund
    condition: input.amount >= 5000
    effect: require_approval
    requiredApprovals: 2
",
    )
    .expect("write the file");
    let cases = dir.path().join("cases.yaml");
    std::fs::write(
        &cases,
        "- {name: big, actionName: refund, payload: {paymentIntent: pi_1, amount: 9000},
   expect: {effect: require_approval, requiredApprovals: 2}}
- {name: small, actionName: refund, payload: {paymentIntent: pi_1, amount: 10},
   expect: {effect: null}}
",
    )
    .expect("write the cases");
    let file_arg = file.to_str().unwrap();
    let policies = |api: &Api| {
        let api = api.clone();
        async move { api.get("/approval-policies").await.data().clone() }
    };

    let planned = cli(
        &w.server,
        &operator_key,
        &["policies", "plan", file_arg, "--json"],
    )
    .await
    .json();
    assert_eq!(planned["summary"]["create"], 1);
    let digest = planned["digest"].as_str().unwrap().to_string();
    assert_eq!(
        policies(&w.operator).await.as_array().map(Vec::len),
        Some(0),
        "plan is read-only"
    );

    let tested = cli(
        &w.server,
        &operator_key,
        &[
            "policies",
            "test",
            file_arg,
            "--cases",
            cases.to_str().unwrap(),
        ],
    )
    .await;
    assert!(tested.ok, "{}{}", tested.stdout, tested.stderr);
    assert!(tested.stdout.contains("pass  big"), "{}", tested.stdout);
    assert_eq!(
        policies(&w.operator).await.as_array().map(Vec::len),
        Some(0),
        "test writes nothing"
    );
    assert_eq!(w.fixture.write_count(), 0, "test dispatches nothing");

    // An edit between plan and apply: the plan is stale and nothing of it is applied.
    let other = w
        .operator
        .post(
            "/approval-policies",
            serde_json::json!({"name": "late edit", "matchKind": "action",
                               "matchActionName": "refund", "effect": "auto_approve"}),
        )
        .await;
    assert_eq!(other.status, 201, "{:?}", other.body);
    let stale = cli(
        &w.server,
        &operator_key,
        &["policies", "apply", file_arg, "--digest", &digest],
    )
    .await;
    assert!(
        !stale.ok && stale.stderr.contains("STALE_PLAN"),
        "{}",
        stale.stderr
    );
    let names: Vec<String> = policies(&w.operator)
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["late edit"], "a stale plan changes nothing");

    // Planned again (it now also deletes the late edit, which the file does not list) and
    // applied: exactly the reviewed change.
    let replanned = cli(
        &w.server,
        &operator_key,
        &["policies", "plan", file_arg, "--json"],
    )
    .await
    .json();
    assert_eq!(replanned["summary"]["delete"], 1);
    let applied = cli(
        &w.server,
        &operator_key,
        &[
            "policies",
            "apply",
            file_arg,
            "--digest",
            replanned["digest"].as_str().unwrap(),
            "--note",
            "reviewed in PR 12",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(applied["applied"], true);
    let live = applied["policies"].as_array().unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0]["name"], "big refunds need two");
    assert_eq!(live[0]["requiredApprovals"], 2);

    // The applied policy decides: a big refund parks for two approvers.
    let parked = w
        .agent
        .invoke(
            "refund",
            serde_json::json!({"paymentIntent": "pi_1", "amount": 9000}),
            Some("file-1"),
            None,
        )
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);

    // A file with problems is refused with every problem named.
    std::fs::write(
        &file,
        "policies:\n  - {name: x, matchKind: action, effect: maybe}\n  - {name: y, colour: red}\n",
    )
    .expect("write the broken file");
    let refused = cli(&w.server, &operator_key, &["policies", "plan", file_arg]).await;
    assert!(!refused.ok);
    assert!(
        refused.stderr.contains("policies[0].effect")
            && refused.stderr.contains("policies[1].colour"),
        "{}",
        refused.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_not_there_or_not_steward_is_named_with_the_way_to_point_elsewhere() {
    // A port nothing listens on: bound, read and let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("http://127.0.0.1:{port}");
    let ran = cli_at(&nowhere, "stw_not_checked", &["approvals", "list"]).await;
    assert!(!ran.ok, "{}", ran.stdout);
    for needle in [
        nowhere.as_str(),
        "could not be reached",
        "--server",
        "STEWARD_SERVER",
    ] {
        assert!(
            ran.stderr.contains(needle),
            "no {needle:?} in {}",
            ran.stderr
        );
    }

    // The fixture answers HTTP, but it is not Steward.
    let fixture = fixture().await;
    let url = format!("http://{}", fixture.addr());
    let ran = cli_at(&url, "stw_not_checked", &["approvals", "list"]).await;
    assert!(!ran.ok, "{}", ran.stdout);
    for needle in [url.as_str(), "is it a Steward server", "--server"] {
        assert!(
            ran.stderr.contains(needle),
            "no {needle:?} in {}",
            ran.stderr
        );
    }
}

/// `steward approvals approve ID ID ... --note`: each approval is its own decision, with the one
/// note; the ids the key may decide are decided and dispatched once each, the one it requested
/// is refused (separation of duties, per approval), and each id's outcome is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_approvals_is_decided_one_by_one_with_one_note() {
    let w = gated_world(&[]).await;
    let (agent_key, operator_key) = (
        w.server.keys("test", "agent"),
        w.server.keys("test", "operator"),
    );
    let agent = Api::new(&w.server, &agent_key);
    let operator = Api::new(&w.server, &operator_key);
    let mut ids = Vec::new();
    for n in 1..=2 {
        let parked = agent
            .invoke("refund", refund_input(n), Some(&format!("batch-{n}")), None)
            .await;
        assert_eq!(parked.status, 202, "{:?}", parked.body);
        ids.push(parked.data()["approvalId"].as_str().unwrap().to_string());
    }
    // A custom request the operator key itself asked for: it may not decide it.
    let own = operator
        .post("/approvals", serde_json::json!({"title": "mine"}))
        .await;
    assert_eq!(own.status, 201, "{:?}", own.body);
    let own_id = own.data()["id"].as_str().unwrap().to_string();

    let mut args = vec!["approvals", "approve"];
    args.extend(ids.iter().map(String::as_str));
    args.extend([own_id.as_str(), "--note", "batch checked", "--json"]);
    let ran = cli(&w.server, &operator_key, &args).await;
    assert!(!ran.ok, "one of three was refused, so the command fails");
    assert!(
        ran.stderr.contains("1 of 3 decisions were not counted"),
        "{}",
        ran.stderr
    );
    let outcomes: Vec<Value> = ran
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per id"))
        .collect();
    assert_eq!(outcomes.len(), 3, "{}", ran.stdout);
    for (outcome, id) in outcomes.iter().zip(&ids) {
        assert_eq!(outcome["id"], id.as_str());
        assert_eq!(outcome["counted"], true, "{outcome}");
        assert_eq!(outcome["status"], "approved");
        assert_eq!(outcome["invocation"]["status"], "succeeded");
    }
    assert_eq!(outcomes[2]["id"], own_id.as_str());
    assert_eq!(outcomes[2]["counted"], false);
    assert!(
        outcomes[2]["error"].as_str().unwrap().contains("HTTP 403"),
        "{}",
        outcomes[2]
    );
    assert_eq!(w.fixture.write_count(), 2, "each approved call ran once");
    for id in &ids {
        let read = operator.get(&format!("/approvals/{id}")).await;
        assert_eq!(read.data()["decisions"][0]["note"], "batch checked");
    }
    // The same batch again changes nothing and says so for each id.
    let again = cli(
        &w.server,
        &operator_key,
        &["approvals", "approve", &ids[0], &ids[1]],
    )
    .await;
    assert!(!again.ok);
    assert_eq!(
        again.stdout.matches("not counted").count(),
        2,
        "{}",
        again.stdout
    );
    assert_eq!(w.fixture.write_count(), 2);
}
