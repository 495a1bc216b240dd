"""Conformance: the official Anlyon Python SDK (anlyon==0.6.0), unchanged, against Steward.

Every call to Steward goes through `anlyon.Client`. The provider fixture's control API is read
with urllib only to count committed writes (what the provider actually did, not HTTP 200s).
"""

from __future__ import annotations

import secrets as pysecrets
import threading
import time
import typing
import uuid
from typing import Any

import anlyon
import pytest
from anlyon import (
    AnlyonError,
    ApiResponse,
    AuthenticationError,
    NotFoundError,
    ScopeCheckError,
    ValidationError,
)
from anlyon.resources import actions as sdk_actions

from conftest import STRIPE_SECRET_NAME, Steward

AGENT_SCOPES = {
    "actions:read",
    "actions:invoke",
    "approvals:read",
    "approvals:request",
    "impact-limits:read",
    "runs:read",
    "runs:write",
}
LISTING = 200  # Steward's largest page: every record this session creates fits on one.


def new_pi() -> str:
    return "pi_" + pysecrets.token_hex(8)


def refund_input(amount: int = 1250) -> dict[str, Any]:
    return {"paymentIntent": new_pi(), "amount": amount}


def ids(listing: Any) -> list[str]:
    assert isinstance(listing, ApiResponse), type(listing)
    assert isinstance(listing.data, list), listing
    return [item["id"] for item in listing.data]


def invocation_total(client: anlyon.Client) -> int:
    return int(client.actions.invocations(limit=1).pagination["total"])


def expect_error(call: Any, *, status: int, code: str, error_type: type = AnlyonError) -> AnlyonError:
    with pytest.raises(error_type) as caught:
        call()
    err = caught.value
    assert err.status == status, err
    assert err.code == code, err
    assert err.request_id, "an error answer carries x-request-id"
    return err


# -- request ids ---------------------------------------------------------------------------


def test_every_response_carries_a_request_id(operator: anlyon.Client) -> None:
    listing = operator.actions.list()
    assert isinstance(listing, ApiResponse)
    assert listing.success is True
    assert listing.request_id and listing.request_id.startswith("req_"), listing.request_id
    again = operator.auth.identity()
    assert again.request_id and again.request_id != listing.request_id
    err = expect_error(lambda: operator.actions.get("no-such-action"), status=404,
                       code="NOT_FOUND", error_type=NotFoundError)
    assert err.request_id.startswith("req_")


# -- auth ----------------------------------------------------------------------------------


def test_identity_and_scope_checks(steward: Steward, operator: anlyon.Client, agent: anlyon.Client,
                                   readonly: anlyon.Client, other_operator: anlyon.Client) -> None:
    op = operator.auth.identity().data
    assert op["credentialType"] == "api_key"
    assert op["apiKeyId"].startswith("key_")
    assert op["environmentId"].startswith("env_")
    assert isinstance(op["scopes"], list) and all(isinstance(s, str) for s in op["scopes"])
    assert {"actions:write", "actions:invoke", "secrets:write", "secrets:read"} <= set(op["scopes"])
    assert all(k not in repr(op) for k in steward.keys.values()), "identity must not echo the key"

    ag = agent.auth.identity().data
    assert ag["credentialType"] == "api_key"
    assert set(ag["scopes"]) == AGENT_SCOPES
    assert ag["apiKeyId"] != op["apiKeyId"]
    assert ag["environmentId"] == op["environmentId"]

    ro = readonly.auth.identity().data
    assert ro["scopes"] == ["actions:read"]
    assert ro["environmentId"] == op["environmentId"]

    other = other_operator.auth.identity().data
    assert other["environmentId"] != op["environmentId"]

    env = operator.environment.get().data
    assert env["id"] == op["environmentId"]
    assert env["halted"] is False

    checked = agent.auth.require_scopes(["actions:read", "actions:invoke"],
                                        forbidden=["actions:write", "secrets:write"])
    assert checked["apiKeyId"] == ag["apiKeyId"]
    with pytest.raises(ScopeCheckError) as missing:
        agent.auth.require_scopes(["actions:invoke", "actions:write"])
    assert missing.value.missing == ["actions:write"]
    with pytest.raises(ScopeCheckError) as forbidden:
        operator.auth.require_scopes(["actions:invoke"], forbidden=["secrets:write"])
    assert forbidden.value.forbidden == ["secrets:write"]
    with pytest.raises(ScopeCheckError):
        readonly.auth.require_scopes(["actions:invoke"])


@pytest.mark.parametrize("bad_key", ["stw_" + "0" * 64, "not-a-steward-key"])
def test_an_invalid_key_is_refused(steward: Steward, bad_key: str) -> None:
    client = steward.client(bad_key)
    expect_error(client.auth.identity, status=401, code="AUTHENTICATION_FAILED",
                 error_type=AuthenticationError)
    expect_error(client.actions.list, status=401, code="AUTHENTICATION_FAILED",
                 error_type=AuthenticationError)


# -- secrets -------------------------------------------------------------------------------


def test_secrets_are_write_only_and_rotation_never_widens(steward: Steward,
                                                          operator: anlyon.Client) -> None:
    name = "SDK_DEMO_TOKEN"
    first_value = "demo_" + pysecrets.token_hex(16)
    second_value = "demo_" + pysecrets.token_hex(16)
    steward.secret_values += [first_value, second_value]

    def clean(response: Any, *values: str) -> Any:
        text = repr(response.data)
        for value in values:
            assert value not in text, "a secret value came back from the API"
        items = response.data if isinstance(response.data, list) else [response.data]
        assert all("value" not in item for item in items), response.data
        return response.data

    put = clean(operator.secrets.put(name, value=first_value, description="demo",
                                     allowed_hosts=[steward.fixture_host, "api.example.com"]), first_value)
    assert put["name"] == name
    assert sorted(put["allowedHosts"]) == sorted([steward.fixture_host, "api.example.com"])
    assert put["description"] == "demo"

    listed = clean(operator.secrets.list(), first_value)
    assert name in [s["name"] for s in listed]

    got = clean(operator.secrets.get(name), first_value)
    assert got["name"] == name and got["version"] == put["version"]

    # Narrowing on rotation is allowed.
    narrowed = clean(operator.secrets.put(name, value=second_value, allowed_hosts=[steward.fixture_host]),
                     first_value, second_value)
    assert narrowed["allowedHosts"] == [steward.fixture_host]
    assert narrowed["version"] > put["version"]
    assert narrowed["description"] == "demo", "a field left out is kept"

    # Omitting allowed_hosts keeps the restriction.
    kept = clean(operator.secrets.put(name, value=second_value), first_value, second_value)
    assert kept["allowedHosts"] == [steward.fixture_host]

    # Widening (adding a host, or clearing the list) is refused, and nothing changes.
    for widened in ([steward.fixture_host, "api.example.com"], None):
        err = expect_error(
            lambda: operator.secrets.put(name, value=first_value, allowed_hosts=widened),
            status=400, code="VALIDATION_ERROR", error_type=ValidationError)
        assert err.details["field"] == "allowedHosts", err.details
        assert first_value not in str(err) and first_value not in repr(err.details)
    after = clean(operator.secrets.get(name), first_value, second_value)
    assert after["allowedHosts"] == [steward.fixture_host]
    assert after["version"] == kept["version"], "a refused rotation must not rotate the value"

    deleted = operator.secrets.delete(name).data
    assert deleted["deleted"] is True
    expect_error(lambda: operator.secrets.get(name), status=404, code="NOT_FOUND",
                 error_type=NotFoundError)
    assert name not in [s["name"] for s in operator.secrets.list().data]
    expect_error(lambda: operator.secrets.delete(name), status=404, code="NOT_FOUND",
                 error_type=NotFoundError)


def test_the_adapter_credential_is_only_metadata(steward: Steward, operator: anlyon.Client,
                                                 stripe_secret: str) -> None:
    got = operator.secrets.get(stripe_secret)
    assert got.data["name"] == STRIPE_SECRET_NAME
    assert got.data["allowedHosts"] == [steward.fixture_host]
    for value in steward.secret_values:
        assert value not in repr(got.data)


# -- actions -------------------------------------------------------------------------------


def template_definition(steward: Steward) -> dict[str, Any]:
    return {
        "url_template": f"{steward.fixture_url}/v1/refunds",
        "method": "POST",
        "headers": {"Authorization": "Bearer {{secret:" + STRIPE_SECRET_NAME + "}}"},
        "body_template": {"payment_intent": "{{input.pi}}", "amount": "{{input.amount}}"},
    }


def test_actions_create_get_list_update_versions(steward: Steward, operator: anlyon.Client,
                                                 stripe_secret: str) -> None:
    definition = template_definition(steward)
    created = operator.actions.create(name="sdk-template-refund", description="v1", **definition)
    action = created.data
    assert action["id"].startswith("act_")
    assert action["name"] == "sdk-template-refund"
    assert action["version"] == 1
    assert action["urlTemplate"] == definition["url_template"]
    assert action["headers"] == definition["headers"]
    assert action["bodyTemplate"] == definition["body_template"]
    assert action["method"] == "POST"
    assert action["governed"] is False

    by_name = operator.actions.get("sdk-template-refund").data
    by_id = operator.actions.get(action["id"]).data
    assert by_name == by_id
    assert by_id["id"] == action["id"]
    assert action["id"] in ids(operator.actions.list())

    # PATCH semantics: only the field sent changes.
    v2 = operator.actions.update("sdk-template-refund", description="v2").data
    assert v2["id"] == action["id"]
    assert v2["version"] == 2
    assert v2["description"] == "v2"
    for key in ("urlTemplate", "headers", "bodyTemplate", "method", "name", "governed"):
        assert v2[key] == action[key], key

    new_body = dict(definition["body_template"], currency="usd")
    v3 = operator.actions.update(action["id"], body_template=new_body).data
    assert v3["version"] == 3
    assert v3["bodyTemplate"] == new_body
    assert v3["description"] == "v2", "a field left out is unchanged"
    assert operator.actions.get(action["id"]).data["version"] == 3

    versions = operator.actions.versions("sdk-template-refund").data
    assert [v["version"] for v in versions] == [1, 2, 3], "versions, oldest first"
    assert [v["description"] for v in versions] == ["v1", "v2", "v2"]
    assert versions[0]["bodyTemplate"] == definition["body_template"]
    assert versions[2]["bodyTemplate"] == new_body
    assert all(v["actionId"] == action["id"] for v in versions)
    assert len({v["id"] for v in versions}) == 3
    assert operator.actions.versions(action["id"]).data == versions


def test_actions_rename_and_delete(steward: Steward, operator: anlyon.Client,
                                   stripe_secret: str) -> None:
    action = operator.actions.create(name="sdk-throwaway", **template_definition(steward)).data
    renamed = operator.actions.update("sdk-throwaway", name="sdk-throwaway-renamed").data
    assert renamed["id"] == action["id"] and renamed["name"] == "sdk-throwaway-renamed"
    assert operator.actions.get("sdk-throwaway-renamed").data["id"] == action["id"]
    expect_error(lambda: operator.actions.get("sdk-throwaway"), status=404, code="NOT_FOUND",
                 error_type=NotFoundError)

    deleted = operator.actions.delete(action["id"]).data
    assert deleted["deleted"] is True
    expect_error(lambda: operator.actions.get(action["id"]), status=404, code="NOT_FOUND",
                 error_type=NotFoundError)
    assert action["id"] not in ids(operator.actions.list())
    expect_error(lambda: operator.actions.invoke("sdk-throwaway-renamed", {"pi": new_pi(), "amount": 1}),
                 status=404, code="NOT_FOUND", error_type=NotFoundError)


def test_action_create_honours_idempotency_key(steward: Steward, operator: anlyon.Client,
                                               stripe_secret: str) -> None:
    key = str(uuid.uuid4())
    definition = template_definition(steward)
    first = operator.actions.create(name="sdk-idem-create", idempotency_key=key, **definition).data
    again = operator.actions.create(name="sdk-idem-create", idempotency_key=key, **definition).data
    assert again["id"] == first["id"]
    assert steward.last_response().headers.get("idempotent-replayed") == "true"
    assert ids(operator.actions.list()).count(first["id"]) == 1

    expect_error(lambda: operator.actions.create(name="sdk-idem-create-2", idempotency_key=key,
                                                 **definition),
                 status=422, code="idempotency_key_reused")
    expect_error(lambda: operator.actions.get("sdk-idem-create-2"), status=404, code="NOT_FOUND",
                 error_type=NotFoundError)
    # Without a key the SDK sends a fresh one, so this is a new request and the name is taken.
    expect_error(lambda: operator.actions.create(name="sdk-idem-create", **definition),
                 status=409, code="already_exists")


# -- invoke ----------------------------------------------------------------------------------


def test_adapter_invoke_is_confirmed_and_readable(steward: Steward, operator: anlyon.Client,
                                                  refund_action: dict[str, Any]) -> None:
    before = steward.fixture_writes()
    payload = refund_input()
    # A runId must name a run of the environment (docs/DECISIONS.md, runs and spans).
    run_id = operator.runs.start(name="sdk conformance").data["id"]
    result = operator.actions.invoke("refund-payment", payload, run_id=run_id)
    inv = result.data
    assert result.request_id
    assert inv["id"].startswith("inv_")
    assert inv["status"] == "succeeded"
    assert inv["grade"] == "confirmed"
    assert inv["outcome"] == "succeeded"
    assert inv["stage"] == "settled"
    assert inv["unresolved"] is False
    assert inv["pendingApproval"] is False
    assert inv["effectId"].startswith("eff_")
    assert inv["actionId"] == refund_action["id"]
    assert inv["runId"] == run_id
    assert inv["input"] == payload

    assert steward.fixture_writes() == before + 1, "exactly one committed refund"
    write = steward.fixture_write_list()[-1]
    assert write["payment_intent"] == payload["paymentIntent"]
    assert write["amount"] == payload["amount"]
    assert write["metadata"]["steward_invocation_id"] == inv["id"]

    read = operator.actions.invocation(inv["id"]).data
    for key in ("id", "status", "grade", "effectId", "actionId", "input", "runId"):
        assert read[key] == inv[key], key

    effect = operator.actions.effect(inv["effectId"]).data
    assert effect["id"] == inv["effectId"]
    assert effect["invocationId"] == inv["id"]
    assert effect["stage"] == "settled"
    assert effect["outcome"] == "succeeded"
    assert effect["grade"] == "confirmed"
    assert effect["unresolved"] is False
    assert effect["externalReference"].startswith("re_")
    assert effect["externalReference"] == write["id"]
    assert isinstance(effect["attempts"], list) and len(effect["attempts"]) == 1
    assert effect["attempts"][0]["responseStatus"] == 200
    assert isinstance(effect["evidence"], list) and effect["evidence"]
    kinds = [e["kind"] for e in effect["evidence"]]
    assert "accepted" in kinds and "attempt" in kinds, kinds

    # Listings and filters.
    succeeded = operator.actions.invocations(status="succeeded", limit=LISTING)
    assert inv["id"] in ids(succeeded)
    assert {i["status"] for i in succeeded.data} == {"succeeded"}
    assert succeeded.pagination["total"] >= 1
    assert inv["id"] not in ids(operator.actions.invocations(status="failed", limit=LISTING))
    assert inv["id"] not in ids(operator.actions.invocations(status="unknown", limit=LISTING))
    assert inv["id"] in ids(operator.actions.invocations(action="refund-payment", limit=LISTING))
    assert inv["id"] in ids(operator.actions.invocations_for("refund-payment", limit=LISTING))
    assert inv["id"] in ids(operator.actions.invocations_for(refund_action["id"], limit=LISTING))

    confirmed = operator.actions.effects(grade="confirmed", limit=LISTING)
    assert inv["effectId"] in ids(confirmed)
    assert {e["grade"] for e in confirmed.data} == {"confirmed"}
    assert inv["effectId"] not in ids(operator.actions.effects(grade="unknown", limit=LISTING))
    resolved = operator.actions.effects(unresolved=False, limit=LISTING)
    assert inv["effectId"] in ids(resolved)
    assert all(e["unresolved"] is False for e in resolved.data)
    assert inv["effectId"] not in ids(operator.actions.effects(unresolved=True, limit=LISTING))
    assert inv["effectId"] in ids(operator.actions.effects(outcome="succeeded", stage="settled",
                                                           limit=LISTING))
    assert inv["effectId"] not in ids(operator.actions.effects(outcome="failed", limit=LISTING))
    assert inv["effectId"] in ids(operator.actions.effects(action="refund-payment", limit=LISTING))


def test_template_action_invoke(steward: Steward, operator: anlyon.Client,
                                stripe_secret: str) -> None:
    operator.actions.create(name="sdk-template-invoke", **template_definition(steward))
    before = steward.fixture_writes()
    pi = new_pi()
    inv = operator.actions.invoke("sdk-template-invoke", {"pi": pi, "amount": 700}).data
    assert inv["status"] == "succeeded", inv
    assert inv["responseStatus"] == 200
    assert "grade" not in inv and "effectId" not in inv, "a plain template action has no effect"
    assert inv["body"]["id"].startswith("re_")
    assert steward.fixture_writes() == before + 1
    write = steward.fixture_write_list()[-1]
    assert write["payment_intent"] == pi and write["amount"] == 700
    for value in steward.secret_values:
        assert value not in repr(inv)


def test_operation_key_replays_and_conflicts(steward: Steward, operator: anlyon.Client,
                                             refund_action: dict[str, Any]) -> None:
    op_key = "refund-order-" + pysecrets.token_hex(6)
    payload = refund_input()
    before = steward.fixture_writes()
    first = operator.actions.invoke("refund-payment", payload, operation_key=op_key,
                                    idempotency_key=str(uuid.uuid4())).data
    assert first["status"] == "succeeded" and first["operationKey"] == op_key
    assert steward.fixture_writes() == before + 1

    second = operator.actions.invoke("refund-payment", payload, operation_key=op_key,
                                     idempotency_key=str(uuid.uuid4())).data
    assert second["id"] == first["id"]
    assert second["effectId"] == first["effectId"]
    assert second["status"] == "succeeded"
    assert steward.fixture_writes() == before + 1, "the same operation must not write again"

    err = expect_error(
        lambda: operator.actions.invoke("refund-payment", dict(payload, amount=999),
                                        operation_key=op_key, idempotency_key=str(uuid.uuid4())),
        status=409, code="operation_key_conflict")
    assert err.details["effectId"] == first["effectId"], err.details
    assert steward.fixture_writes() == before + 1


def test_idempotency_key_replays_and_refuses_reuse(steward: Steward, operator: anlyon.Client,
                                                   refund_action: dict[str, Any]) -> None:
    key = str(uuid.uuid4())
    payload = refund_input()
    before = steward.fixture_writes()
    total = invocation_total(operator)
    first = operator.actions.invoke("refund-payment", payload, idempotency_key=key)
    assert steward.last_response().headers.get("idempotent-replayed") is None
    assert steward.fixture_writes() == before + 1

    again = operator.actions.invoke("refund-payment", payload, idempotency_key=key)
    assert again.data["id"] == first.data["id"]
    assert again.data["status"] == "succeeded"
    assert steward.last_response().headers.get("idempotent-replayed") == "true"
    assert steward.fixture_writes() == before + 1
    assert invocation_total(operator) == total + 1

    expect_error(lambda: operator.actions.invoke("refund-payment", dict(payload, amount=1),
                                                 idempotency_key=key),
                 status=422, code="idempotency_key_reused")
    assert steward.fixture_writes() == before + 1
    assert invocation_total(operator) == total + 1

    # Without a key, the SDK generates a fresh one per call: two calls are two invocations.
    a = operator.actions.invoke("refund-payment", payload).data
    b = operator.actions.invoke("refund-payment", payload).data
    assert a["id"] != b["id"]
    assert steward.fixture_writes() == before + 3


def test_retry_of_links_a_new_attempt_to_a_failed_invocation(
        faults: Steward, operator: anlyon.Client, refund_action: dict[str, Any]) -> None:
    steward = faults
    payload = refund_input()
    steward.set_fault("reject")
    failed = operator.actions.invoke("refund-payment", payload).data
    assert failed["status"] == "failed"

    before = steward.fixture_writes()
    retried = operator.actions.invoke("refund-payment", payload, retry_of=failed["id"]).data
    assert retried["status"] == "succeeded"
    assert retried["retryOf"] == failed["id"]
    assert retried["id"] != failed["id"]
    assert steward.fixture_writes() == before + 1

    expect_error(lambda: operator.actions.invoke("refund-payment", refund_input(),
                                                 retry_of=retried["id"]),
                 status=409, code="retry_of_not_failed")
    err = expect_error(lambda: operator.actions.invoke("refund-payment", refund_input(),
                                                       retry_of="inv_doesnotexist"),
                       status=400, code="VALIDATION_ERROR", error_type=ValidationError)
    assert err.details["field"] == "retryOf"
    assert steward.fixture_writes() == before + 1


FAULTS = [
    # mode, status, grade, outcome, stage, unresolved, committed writes
    ("reject", "failed", "failed", "failed", "settled", False, 0),
    ("error_before_commit", "failed", "failed", "failed", "settled", False, 0),
    ("drop_after_commit", "unknown", "unknown", "unknown", "reconciling", True, 1),
    ("error_after_commit", "unknown", "unknown", "unknown", "reconciling", True, 1),
]


@pytest.mark.parametrize("mode,status,grade,outcome,stage,unresolved,writes", FAULTS,
                         ids=[f[0] for f in FAULTS])
def test_provider_faults_are_graded_honestly(faults: Steward, operator: anlyon.Client,
                                             refund_action: dict[str, Any], mode: str, status: str,
                                             grade: str, outcome: str, stage: str,
                                             unresolved: bool, writes: int) -> None:
    steward = faults
    before = steward.fixture_writes()
    total = invocation_total(operator)
    steward.set_fault(mode)
    seen = len(steward.recorded)

    result = operator.actions.invoke("refund-payment", refund_input())
    inv = result.data
    answers = steward.recorded[seen:]
    assert len(answers) == 1 and answers[0].status == 200, (
        "Steward answers 200 with the recorded invocation, and the SDK sends it once",
        [(a.status, a.url) for a in answers])

    assert inv["status"] == status, inv
    assert inv["grade"] == grade
    assert inv["outcome"] == outcome
    assert inv["stage"] == stage
    assert inv["unresolved"] is unresolved
    assert inv["error"] and inv["error"]["code"], inv
    assert steward.fixture_writes() == before + writes
    assert invocation_total(operator) == total + 1

    effect = operator.actions.effect(inv["effectId"]).data
    assert effect["grade"] == grade and effect["outcome"] == outcome and effect["stage"] == stage
    assert effect["externalReference"] is None
    assert len(effect["attempts"]) == 1
    assert effect["evidence"]

    assert inv["id"] in ids(operator.actions.invocations(status=status, limit=LISTING))
    assert inv["effectId"] in ids(operator.actions.effects(grade=grade, limit=LISTING))
    assert (inv["effectId"] in ids(operator.actions.effects(unresolved=True, limit=LISTING))) \
        is unresolved
    assert inv["effectId"] not in ids(operator.actions.effects(grade="confirmed", limit=LISTING))


# -- validation ----------------------------------------------------------------------------


def test_invalid_input_names_the_field_and_sends_nothing(steward: Steward, operator: anlyon.Client,
                                                         refund_action: dict[str, Any],
                                                         stripe_secret: str) -> None:
    before = steward.fixture_writes()
    total = invocation_total(operator)
    err = expect_error(lambda: operator.actions.invoke("refund-payment", {"paymentIntent": new_pi()}),
                       status=400, code="VALIDATION_ERROR", error_type=ValidationError)
    assert err.details["field"] == "input.amount", err.details
    err = expect_error(lambda: operator.actions.invoke("refund-payment", {"amount": 5}),
                       status=400, code="VALIDATION_ERROR", error_type=ValidationError)
    assert err.details["field"] == "input.paymentIntent", err.details

    operator.actions.create(name="sdk-template-validate", **template_definition(steward))
    err = expect_error(lambda: operator.actions.invoke("sdk-template-validate", {"amount": 5}),
                       status=400, code="VALIDATION_ERROR", error_type=ValidationError)
    assert err.details["field"] == "input.pi", err.details

    # A malformed preview id is refused naming the field (test_previews.py covers the rest).
    err = expect_error(lambda: operator.actions.invoke("refund-payment", refund_input(),
                                                       preview_id="not-a-preview"),
                       status=400, code="VALIDATION_ERROR", error_type=ValidationError)
    assert err.details["field"] == "previewId"

    assert steward.fixture_writes() == before
    assert invocation_total(operator) == total


# -- scopes ------------------------------------------------------------------------------------


def test_scopes_are_enforced(steward: Steward, operator: anlyon.Client, agent: anlyon.Client,
                             readonly: anlyon.Client, refund_action: dict[str, Any]) -> None:
    forbidden = dict(status=403, code="FORBIDDEN")
    expect_error(lambda: agent.actions.create(name="sdk-agent-made", **template_definition(steward)),
                 **forbidden)
    expect_error(lambda: operator.actions.get("sdk-agent-made"), status=404, code="NOT_FOUND")
    expect_error(lambda: agent.actions.update("refund-payment", description="agent edit"), **forbidden)
    expect_error(lambda: agent.actions.delete("refund-payment"), **forbidden)
    assert operator.actions.get("refund-payment").data["description"] == refund_action["description"]

    expect_error(lambda: agent.secrets.put("SDK_AGENT_SECRET", value="sk_test_agent_made"), **forbidden)
    expect_error(agent.secrets.list, **forbidden)
    expect_error(lambda: operator.secrets.get("SDK_AGENT_SECRET"), status=404, code="NOT_FOUND")

    before = steward.fixture_writes()
    expect_error(lambda: readonly.actions.invoke("refund-payment", refund_input()), **forbidden)
    assert steward.fixture_writes() == before
    expect_error(lambda: readonly.actions.create(name="sdk-ro-made", **template_definition(steward)),
                 **forbidden)
    # What the read-only key may do, it can.
    assert refund_action["id"] in ids(readonly.actions.list())
    assert readonly.actions.get("refund-payment").data["id"] == refund_action["id"]

    # The agent may invoke.
    inv = agent.actions.invoke("refund-payment", refund_input()).data
    assert inv["status"] == "succeeded"
    assert steward.fixture_writes() == before + 1


# -- environments ------------------------------------------------------------------------------


def test_environments_are_isolated(steward: Steward, operator: anlyon.Client,
                                   other_operator: anlyon.Client,
                                   refund_action: dict[str, Any]) -> None:
    inv = operator.actions.invoke("refund-payment", refund_input()).data
    assert inv["status"] == "succeeded"
    action_id, inv_id, effect_id = refund_action["id"], inv["id"], inv["effectId"]
    not_found = dict(status=404, code="NOT_FOUND", error_type=NotFoundError)

    expect_error(lambda: other_operator.actions.get(action_id), **not_found)
    expect_error(lambda: other_operator.actions.get("refund-payment"), **not_found)
    expect_error(lambda: other_operator.actions.versions(action_id), **not_found)
    expect_error(lambda: other_operator.actions.invocation(inv_id), **not_found)
    expect_error(lambda: other_operator.actions.effect(effect_id), **not_found)
    expect_error(lambda: other_operator.actions.invocations_for(action_id), **not_found)
    expect_error(lambda: other_operator.secrets.get(STRIPE_SECRET_NAME), **not_found)
    expect_error(lambda: other_operator.actions.update(action_id, description="hijack"), **not_found)
    expect_error(lambda: other_operator.actions.delete(action_id), **not_found)
    before = steward.fixture_writes()
    expect_error(lambda: other_operator.actions.invoke(action_id, refund_input()), **not_found)
    assert steward.fixture_writes() == before

    assert action_id not in ids(other_operator.actions.list())
    assert inv_id not in ids(other_operator.actions.invocations(limit=LISTING))
    assert inv_id not in ids(other_operator.actions.invocations(action=action_id, limit=LISTING))
    assert effect_id not in ids(other_operator.actions.effects(limit=LISTING))
    assert effect_id not in ids(other_operator.actions.effects(action=action_id, limit=LISTING))
    assert STRIPE_SECRET_NAME not in [s["name"] for s in other_operator.secrets.list().data]

    # Names are per environment: the other environment may use the same one independently.
    theirs = other_operator.actions.create(name="refund-payment",
                                           **template_definition(steward)).data
    assert theirs["id"] != action_id
    assert operator.actions.get("refund-payment").data["id"] == action_id
    assert operator.actions.get(action_id).data["description"] == refund_action["description"]


# -- the SDK's filter vocabulary -------------------------------------------------------------


def _literals(alias: Any) -> list[str]:
    values: list[str] = []
    for arg in typing.get_args(alias):
        if isinstance(arg, str):
            values.append(arg)
        else:
            values += _literals(arg)
    return values


def test_every_filter_value_the_sdk_declares_is_accepted(operator: anlyon.Client) -> None:
    """The SDK's Literal types are the contract for filter values; Steward must accept each."""
    statuses = _literals(sdk_actions.InvocationStatus)
    assert "unknown" in statuses and "pending_approval" in statuses
    for status in statuses:
        listing = operator.actions.invocations(status=status, limit=LISTING)
        assert all(i["status"] == status for i in listing.data), status
    for field, values in (("outcome", _literals(sdk_actions.EffectOutcome)),
                          ("stage", _literals(sdk_actions.EffectStage)),
                          ("grade", list(sdk_actions.EFFECT_GRADES))):
        assert values, field
        for value in values:
            listing = operator.actions.effects(**{field: value}, limit=LISTING)
            assert all(e[field] == value for e in listing.data), (field, value)
    for kwargs, field in (({"status": "bogus"}, "status"),):
        err = expect_error(lambda: operator.actions.invocations(**kwargs), status=400,
                           code="VALIDATION_ERROR", error_type=ValidationError)
        assert err.details["field"] == field
    for kwargs, field in (({"grade": "bogus"}, "grade"), ({"stage": "bogus"}, "stage"),
                          ({"outcome": "bogus"}, "outcome")):
        err = expect_error(lambda: operator.actions.effects(**kwargs), status=400,
                           code="VALIDATION_ERROR", error_type=ValidationError)
        assert err.details["field"] == field


# -- what is refused before anything is sent ---------------------------------------------------


def test_secret_destination_policy_blocks_the_request(steward: Steward,
                                                      operator: anlyon.Client) -> None:
    """A secret only goes where its policy allows; otherwise nothing is sent at all."""
    value = "sk_test_" + pysecrets.token_hex(16)
    steward.secret_values.append(value)
    url = f"{steward.fixture_url}/v1/refunds"
    body = {"payment_intent": "{{input.pi}}", "amount": "{{input.amount}}"}
    cases = [
        ("SDK_ELSEWHERE_KEY", {"allowed_hosts": ["api.example.com"]}, "sdk-wrong-host"),
        ("SDK_BODY_ONLY_KEY", {"allowed_hosts": [steward.fixture_host],
                               "allowed_placements": ["body"]},
         "sdk-wrong-placement"),
    ]
    for secret, policy, action in cases:
        operator.secrets.put(secret, value=value, **policy)
        operator.actions.create(name=action, url_template=url, body_template=body,
                                headers={"Authorization": "Bearer {{secret:" + secret + "}}"})
        before = steward.fixture_writes()
        inv = operator.actions.invoke(action, {"pi": new_pi(), "amount": 10}).data
        assert inv["status"] == "failed", inv
        assert inv["responseStatus"] is None
        assert steward.fixture_writes() == before, f"{action}: nothing may be sent"
        assert value not in repr(inv)


def test_a_disabled_action_is_not_invoked(steward: Steward, operator: anlyon.Client,
                                          stripe_secret: str) -> None:
    operator.actions.create(name="sdk-disabled", enabled=False, **template_definition(steward))
    before = steward.fixture_writes()
    expect_error(lambda: operator.actions.invoke("sdk-disabled", {"pi": new_pi(), "amount": 3}),
                 status=409, code="action_disabled")
    assert steward.fixture_writes() == before
    assert operator.actions.update("sdk-disabled", enabled=True).data["enabled"] is True
    assert operator.actions.invoke("sdk-disabled", {"pi": new_pi(), "amount": 3}).data["status"] \
        == "succeeded"
    assert steward.fixture_writes() == before + 1


def test_input_schema_errors_name_the_field(steward: Steward, operator: anlyon.Client,
                                            stripe_secret: str) -> None:
    schema = {"type": "object", "required": ["pi", "amount"],
              "properties": {"pi": {"type": "string"}, "amount": {"type": "integer", "minimum": 1}}}
    operator.actions.create(name="sdk-schema", input_schema=schema, **template_definition(steward))
    before = steward.fixture_writes()
    err = expect_error(lambda: operator.actions.invoke("sdk-schema", {"pi": new_pi(), "amount": "x"}),
                       status=400, code="VALIDATION_ERROR", error_type=ValidationError)
    assert err.details["field"] == "input.amount", err.details
    err = expect_error(lambda: operator.actions.invoke("sdk-schema", {"amount": 4}),
                       status=400, code="VALIDATION_ERROR", error_type=ValidationError)
    assert err.details["field"] == "input.pi", err.details
    err = expect_error(lambda: operator.actions.create(name="sdk-bad-schema", input_schema={"type": 12},
                                                       **template_definition(steward)),
                       status=400, code="VALIDATION_ERROR", error_type=ValidationError)
    assert err.details["field"] == "inputSchema"
    assert steward.fixture_writes() == before


def test_an_approval_gated_action_parks_and_sends_nothing(steward: Steward, operator: anlyon.Client,
                                                          refund_action: dict[str, Any]) -> None:
    adapter = dict(refund_action["adapter"])
    operator.actions.create(name="sdk-gated-refund", adapter=adapter, requires_approval=True)
    before = steward.fixture_writes()
    inv = operator.actions.invoke("sdk-gated-refund", refund_input()).data
    assert inv["pendingApproval"] is True
    assert inv["status"] == "pending_approval"
    assert inv["grade"] == "pending"
    assert inv["stage"] == "awaiting_approval"
    assert steward.fixture_writes() == before
    assert inv["id"] in ids(operator.actions.invocations(status="pending_approval", limit=LISTING))


def test_a_gated_invocation_is_observed_then_approved_once(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client,
        refund_action: dict[str, Any]) -> None:
    name = "sdk-gated-approval"
    operator.actions.create(name=name, adapter=dict(refund_action["adapter"]), requires_approval=True)
    before = steward.fixture_writes()
    payload = refund_input()
    key = f"gated-{uuid.uuid4()}"
    inv = agent.actions.invoke(name, payload, operation_key=key).data
    assert inv["status"] == "pending_approval" and inv["pendingApproval"] is True
    assert isinstance(inv["approvalId"], str) and inv["approvalId"].startswith("apr_"), inv
    # Resubmitting observes the same approval instead of creating another.
    again = agent.actions.invoke(name, payload, operation_key=key).data
    assert again["id"] == inv["id"] and again["approvalId"] == inv["approvalId"]
    pending = operator.approvals.list(status="pending").data
    assert [a["id"] for a in pending].count(inv["approvalId"]) == 1
    assert steward.fixture_writes() == before, "nothing runs while parked"

    decided = operator.approvals.approve(inv["approvalId"], note="looks right").data
    # As the SDK's own tests read it: the approval and the invocation it released, dispatched.
    assert decided["approval"]["status"] == "approved"
    assert decided["approval"]["decisionNote"] == "looks right"
    assert decided["invocation"]["id"] == inv["id"]
    assert decided["invocation"]["status"] == "succeeded"
    assert agent.approvals.wait_for_decision(inv["approvalId"], timeout_seconds=10)["status"] == "approved"
    assert agent.actions.invocation(inv["id"]).data["status"] == "succeeded"
    assert steward.fixture_writes() == before + 1


def test_a_key_never_decides_what_it_requested(
        operator: anlyon.Client, agent: anlyon.Client) -> None:
    asked = operator.approvals.request(title="Rotate the key?", payload={"why": "test"}).data
    with pytest.raises(anlyon.AnlyonError) as own:
        operator.approvals.approve(asked["id"])
    assert own.value.status == 403 and own.value.code == "self_decision_forbidden"
    with pytest.raises(anlyon.AnlyonError) as agent_decides:
        agent.approvals.deny(asked["id"])
    assert agent_decides.value.status == 403


# -- a request still running -------------------------------------------------------------------


def test_a_concurrent_call_with_the_same_key_is_told_to_wait(
        faults: Steward, operator: anlyon.Client, refund_action: dict[str, Any]) -> None:
    steward = faults
    key = str(uuid.uuid4())
    payload = refund_input()
    before = steward.fixture_writes()
    steward.set_fault("hold_after_commit", ms=3000)
    # A separate client: the first call blocks its own connection while it runs.
    second_client = steward.client(steward.keys["operator"])
    results: dict[str, Any] = {}

    def first_call() -> None:
        try:
            results["first"] = operator.actions.invoke("refund-payment", payload, idempotency_key=key)
        except Exception as exc:  # surfaced by the assertions below
            results["first"] = exc

    thread = threading.Thread(target=first_call)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while steward.fixture_writes() == before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert steward.fixture_writes() == before + 1, "the first call reached the provider"
        err = expect_error(lambda: second_client.actions.invoke("refund-payment", payload,
                                                                idempotency_key=key),
                           status=409, code="idempotency_request_in_progress")
        assert err.details == {"idempotency_key": key}, err.details
    finally:
        thread.join(timeout=30)
    assert not thread.is_alive()
    first = results["first"]
    assert isinstance(first, ApiResponse), first
    assert first.data["status"] == "succeeded"

    replay = second_client.actions.invoke("refund-payment", payload, idempotency_key=key)
    assert replay.data["id"] == first.data["id"]
    assert steward.fixture_writes() == before + 1
