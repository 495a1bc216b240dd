"""OpenAPI import and invocation resolution through the official SDK (anlyon==0.6.0), unchanged.

`actions.import_openapi` against the specs under tests/data/openapi (the Petstore 3.0 example as
YAML text, a 3.1 Petstore and a Stripe-shaped subset as objects), dry runs, bounds and field
errors, an imported governed write invoked against the fixture with an operation key, and
`actions.resolve_invocation` with its separation of duties. Each area works in its own
environments. Provider writes are counted at the fixture, never inferred from HTTP 200s.
"""

from __future__ import annotations

import json
import secrets as pysecrets
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from anlyon import AnlyonError

from conftest import REPO, STRIPE_SECRET_NAME, STRIPE_SECRET_VALUE, Steward, create_key

DATA = REPO / "tests" / "data" / "openapi"
# The import's bound on `spec`, in bytes (crates/steward-server/src/api/import/mod.rs).
SPEC_BYTES_MAX = 512 * 1024
BEARER = {"headerName": "Authorization", "secretName": STRIPE_SECRET_NAME,
          "valueTemplate": "Bearer {{secret}}"}


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def error_of(call: Callable[[], Any]) -> AnlyonError:
    with pytest.raises(AnlyonError) as caught:
        call()
    return caught.value


def field_error(call: Callable[[], Any]) -> str:
    err = error_of(call)
    assert err.status == 400 and err.code == "VALIDATION_ERROR", (err.status, err.code, err)
    return err.details["field"]


class Env:
    """One environment: an operator that imports, a second operator that resolves, an agent."""

    def __init__(self, steward: Steward, name: str) -> None:
        self.steward = steward
        self.operator = steward.client(create_key(steward.data_dir, name, f"{name}-op", role="operator"))
        self.resolver = steward.client(create_key(steward.data_dir, name, f"{name}-resolver", role="operator"))
        self.agent = steward.client(create_key(steward.data_dir, name, f"{name}-agent"))
        self.imported: dict[str, Any] = {}
        self.operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                                  allowed_hosts=[steward.fixture_host])

    def names(self) -> list[str]:
        return sorted(a["name"] for a in self.operator.actions.list().data)

    def import_stripe(self, **extra: Any) -> dict[str, Any]:
        return self.operator.actions.import_openapi(
            load("stripe-subset.json"), base_url=self.steward.fixture_url, auth=BEARER, **extra).data


@pytest.fixture(scope="module")
def stripe_env(steward: Steward) -> Env:
    env = Env(steward, "sdk-import-stripe")
    env.imported = env.import_stripe()
    return env


def created(result: dict[str, Any]) -> list[str]:
    return [c["name"] for c in result["created"]]


def skipped(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["method"], s["path"]) for s in result["skipped"]]


def test_petstore_3_0_yaml_text_imports_every_operation(steward: Steward) -> None:
    env = Env(steward, "sdk-import-pet30")
    text = (DATA / "petstore-3.0.yaml").read_text()
    result = env.operator.actions.import_openapi(text)
    assert steward.last_response().status == 201
    assert result.data["dryRun"] is False
    assert created(result.data) == ["listPets", "createPets", "showPetById"]
    assert result.data["skipped"] == []
    by_name = {c["name"]: c for c in result.data["created"]}
    listing, create = by_name["listPets"], by_name["createPets"]
    assert listing["governed"] is False and listing["impact"] is None
    assert listing["proposedVerify"] is None and listing["verifyNote"] is None
    assert any("optional query parameter limit" in w for w in listing["warnings"])
    assert create["governed"] is True
    assert create["impact"] == {"dimension": "resource_mutations", "amount": "1", "bound": "exact",
                                "unit": "resource_mutations"}
    assert create["warnings"] == ["body.id: dropped format (documents the value; not checked)"]
    assert create["id"].startswith("act_")
    stored = env.operator.actions.get("createPets").data
    assert stored["id"] == create["id"] and stored["governed"] is True
    assert stored["urlTemplate"] == "http://petstore.swagger.io/v1/pets"
    assert stored["bodyTemplate"] == "{{input.body}}"
    assert env.names() == ["createPets", "listPets", "showPetById"]


def test_petstore_3_1_skips_with_reasons_and_only_proposes_read_backs(steward: Steward) -> None:
    env = Env(steward, "sdk-import-pet31")
    result = env.operator.actions.import_openapi(load("petstore-3.1.json")).data
    assert created(result) == ["listPets", "createPets", "showPetById", "deletePet"]
    assert skipped(result) == [("PUT", "/pets/{petId}"), ("POST", "/pets/{petId}/photo")]
    reasons = {s["operationId"]: s["reason"] for s in result["skipped"]}
    assert "oneOf" in reasons["replacePet"] and "multipart" in reasons["uploadPetPhoto"]
    by_name = {c["name"]: c for c in result["created"]}
    assert by_name["createPets"]["proposedVerify"] == {
        "url": "https://petstore.swagger.io/v1/pets/{{response.id}}", "status": 200,
        "match": [{"path": "id", "equals": "{{response.id}}"}]}
    assert by_name["deletePet"]["proposedVerify"]["status"] == 404
    assert "GET /pets/{petId}" in by_name["deletePet"]["verifyNote"]
    # Proposed, never applied.
    assert env.operator.actions.get("createPets").data["verify"] is None
    # A second import creates nothing and says why.
    again = env.operator.actions.import_openapi(load("petstore-3.1.json"), only=["createPets"]).data
    assert again["created"] == []
    assert "already exists" in again["skipped"][0]["reason"]


def test_governed_false_imports_plain_template_actions(steward: Steward) -> None:
    env = Env(steward, "sdk-import-plain")
    result = env.operator.actions.import_openapi(load("petstore-3.1.json"), governed=False).data
    assert all(c["governed"] is False and c["impact"] is None for c in result["created"])
    assert all(c["proposedVerify"] is None for c in result["created"])
    assert env.operator.actions.get("deletePet").data["governed"] is False


def test_dry_run_writes_nothing(steward: Steward) -> None:
    env = Env(steward, "sdk-import-dry")
    before = env.operator.actions.list().data
    result = env.operator.actions.import_openapi(
        load("stripe-subset.json"), base_url=steward.fixture_url, auth=BEARER, dry_run=True,
        requires_approval=True)
    assert steward.last_response().status == 200
    assert result.data["dryRun"] is True
    assert created(result.data) == ["GetPaymentIntentsIntent", "PostRefunds", "GetRefundsRefund"]
    assert all(c["id"] is None for c in result.data["created"])
    assert all(c["action"]["requiresApproval"] is True for c in result.data["created"])
    assert env.operator.actions.list().data == before


def test_stripe_subset_write_runs_once_per_operation_key(steward: Steward, stripe_env: Env) -> None:
    env = stripe_env
    assert env.names() == ["GetPaymentIntentsIntent", "GetRefundsRefund", "PostRefunds"]
    action = env.operator.actions.get("PostRefunds").data
    assert action["headers"] == {"Authorization": f"Bearer {{{{secret:{STRIPE_SECRET_NAME}}}}}"}
    assert action["governed"] is True
    body = {"payment_intent": "pi_" + pysecrets.token_hex(8), "amount": 700}
    key = "import-refund-" + pysecrets.token_hex(6)
    before = steward.fixture_writes()
    first = env.agent.actions.invoke("PostRefunds", {"body": body}, operation_key=key).data
    assert first["status"] == "succeeded", first
    assert first["grade"] == "acknowledged"
    assert steward.fixture_writes() == before + 1
    again = env.agent.actions.invoke("PostRefunds", {"body": body}, operation_key=key).data
    assert again["effectId"] == first["effectId"]
    assert steward.fixture_writes() == before + 1, "the same operation key writes nothing more"

    # The proposed read-back is a valid rule, never applied; the spec's GET needs the bearer
    # key, which a read-back does not send, and the note says so.
    assert created(env.imported) == ["GetPaymentIntentsIntent", "PostRefunds", "GetRefundsRefund"]
    assert skipped(env.imported) == [("POST", "/v1/refunds/{refund}/cancel")]
    assert "form-encoded" in env.imported["skipped"][0]["reason"]
    entry = {c["name"]: c for c in env.imported["created"]}["PostRefunds"]
    verify = entry["proposedVerify"]
    assert verify == {"url": steward.fixture_url + "/v1/refunds/{{response.id}}", "status": 200,
                      "match": [{"path": "id", "equals": "{{response.id}}"}]}
    assert "GET /v1/refunds/{refund}" in entry["verifyNote"]
    assert "needs credentials (bearerAuth)" in entry["verifyNote"]
    assert env.operator.actions.get("PostRefunds").data["verify"] is None
    declared = env.operator.actions.declare("PostRefunds", verify=verify).data
    assert declared["verify"] == verify


def test_imported_actions_stay_in_their_environment(steward: Steward, stripe_env: Env,
                                                    other_operator: Any) -> None:
    err = error_of(lambda: other_operator.actions.get("PostRefunds"))
    assert err.status == 404 and err.code == "NOT_FOUND"
    ids = [c["id"] for c in stripe_env.operator.actions.list().data]
    err = error_of(lambda: other_operator.actions.get(ids[0]))
    assert err.status == 404


def test_invalid_input_names_the_field(steward: Steward) -> None:
    env = Env(steward, "sdk-import-invalid")
    op = env.operator.actions
    stripe = load("stripe-subset.json")
    assert field_error(lambda: op.import_openapi({"swagger": "2.0"})) == "spec.openapi"
    assert field_error(lambda: op.import_openapi("x" * (SPEC_BYTES_MAX + 1))) == "spec"
    assert field_error(lambda: op.import_openapi({"openapi": "3.1.0"})) == "spec"
    assert field_error(lambda: op.import_openapi(stripe, only=["nope"])) == "only.0"
    assert field_error(lambda: op.import_openapi(stripe, base_url="ftp://files.example")) == "baseUrl"
    no_server = {k: v for k, v in stripe.items() if k != "servers"}
    assert field_error(lambda: op.import_openapi(no_server)) == "baseUrl"
    bad_secret = {**BEARER, "secretName": "lower case"}
    assert field_error(lambda: op.import_openapi(stripe, auth=bad_secret)) == "auth.secretName"
    no_slot = {**BEARER, "valueTemplate": "Bearer"}
    assert field_error(lambda: op.import_openapi(stripe, auth=no_slot)) == "auth.valueTemplate"
    many = {"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
            "paths": {f"/p{i}": {"get": {}} for i in range(251)}}
    assert field_error(lambda: op.import_openapi(many, base_url="https://a.example")) == "spec.paths"
    assert env.names() == []
    # Only a key that may write actions imports.
    err = error_of(lambda: env.agent.actions.import_openapi(stripe, base_url=steward.fixture_url))
    assert err.status == 403 and err.details["requiredScope"] == "actions:write"


def test_an_idempotency_key_replays_the_import(steward: Steward) -> None:
    key = create_key(steward.data_dir, "sdk-import-idem", "sdk-import-idem-op", role="operator")
    body = {"spec": load("petstore-3.1.json"), "only": ["listPets"]}
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": "import-once"}
    with httpx.Client(base_url=steward.url, headers=headers, trust_env=False) as http:
        first = http.post("/api/v2/actions/import", json=body)
        second = http.post("/api/v2/actions/import", json=body)
        changed = http.post("/api/v2/actions/import", json={**body, "dryRun": True})
    assert first.status_code == 201 and second.status_code == 201
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json() == first.json()
    assert [c["name"] for c in second.json()["data"]["created"]] == ["listPets"]
    assert changed.status_code == 422
    assert changed.json()["error"]["code"] == "idempotency_key_reused"


def test_resolve_invocation_settles_an_unknown_write_by_another_key(
        steward: Steward, stripe_env: Env, other_operator: Any, faults: Steward) -> None:
    env = stripe_env
    body = {"payment_intent": "pi_" + pysecrets.token_hex(8), "amount": 200}
    before = steward.fixture_writes()
    steward.set_fault("drop_after_commit")
    lost = env.operator.actions.invoke("PostRefunds", {"body": body},
                                       operation_key="import-lost-" + pysecrets.token_hex(6)).data
    assert lost["status"] == "unknown", lost
    assert steward.fixture_writes() == before + 1

    err = error_of(lambda: env.operator.actions.resolve_invocation(
        lost["id"], outcome="succeeded", evidence="the refund is in the dashboard"))
    assert err.status == 403 and err.code == "self_resolution_forbidden"
    err = error_of(lambda: other_operator.actions.resolve_invocation(
        lost["id"], outcome="succeeded", evidence="not mine"))
    assert err.status == 404 and err.code == "NOT_FOUND"
    field = field_error(lambda: env.resolver.actions.resolve_invocation(
        lost["id"], outcome="maybe", evidence="x"))  # type: ignore[arg-type]
    assert field == "outcome"

    resolved = env.resolver.actions.resolve_invocation(
        lost["id"], outcome="succeeded", evidence="re_123 is in the provider's dashboard",
        external_reference="re_123").data
    assert resolved["id"] == lost["id"] and resolved["status"] == "succeeded"
    effect = env.resolver.actions.effect(lost["effectId"]).data
    assert effect["evidence"][-1]["kind"] == "manual_resolution"
    err = error_of(lambda: env.resolver.actions.resolve_invocation(
        lost["id"], outcome="failed", evidence="second thoughts"))
    assert err.status == 409 and err.code == "effect_not_unknown"
    assert steward.fixture_writes() == before + 1
