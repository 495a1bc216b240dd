"""Connected accounts through the official SDK (`connections.integrations|list|
connect_with_api_key|check|reconnect`) against a real server whose catalog holds the fixture
as an `api_key` integration: a key is checked with the provider before it is stored, stored as
a vault secret an action can use (counted as a committed refund at the fixture), never echoed,
and its health follows what the provider says of it."""

from __future__ import annotations

import secrets as pysecrets
from typing import Any

import anlyon
import pytest
from anlyon.config import RetryConfig
from anlyon.errors import AnlyonError
from conftest import FIXTURE_INTEGRATION, Steward

NO_RETRY = RetryConfig(max_attempts=1)


def expect(call: Any, *, status: int, code: str) -> AnlyonError:
    with pytest.raises(AnlyonError) as caught:
        call()
    assert caught.value.status == status, caught.value
    assert caught.value.code == code, caught.value
    return caught.value


def new_key(steward: Steward) -> str:
    """A provider key the fixture accepts, remembered for the suite's leak check."""
    key = "sk_test_conn" + pysecrets.token_hex(8)
    steward.secret_values.append(key)
    return key


def new_name() -> str:
    return "CONN_" + pysecrets.token_hex(4).upper()


@pytest.fixture
def operator_once(steward: Steward) -> anlyon.Client:
    """The operator without the SDK's retries, which would resend a 502 key check."""
    return steward.client(steward.keys["operator"], retry=NO_RETRY)


@pytest.fixture
def key_checks(steward: Steward) -> Any:
    steward.set_key_check_fault("none")
    yield steward
    steward.set_key_check_fault("none")


def test_the_catalog_lists_the_fixture_as_an_api_key_integration(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client) -> None:
    listed = {i["id"]: i for i in operator.connections.integrations().data}
    fixture = listed[FIXTURE_INTEGRATION]
    assert fixture["auth"] == {"kind": "api_key"}
    assert fixture["allowedHosts"] == [steward.fixture_host]
    expect(lambda: agent.connections.integrations(), status=403, code="FORBIDDEN")


def test_a_connected_key_is_stored_as_a_secret_an_action_can_use_and_never_echoed(
        steward: Steward, operator: anlyon.Client, other_operator: anlyon.Client) -> None:
    key, name = new_key(steward), new_name()
    done = operator.connections.connect_with_api_key(
        integration_id=FIXTURE_INTEGRATION, secret_name=name, api_key=key,
        description="payments account").data
    assert done["status"] == "completed"
    account = done["connection"]
    assert account["name"] == name and account["integrationId"] == FIXTURE_INTEGRATION
    assert account["authKind"] == "api_key" and account["health"]["status"] == "healthy"
    assert account["allowedHosts"] == [steward.fixture_host]
    assert key not in steward.last_response().body
    secret = operator.secrets.get(name).data
    assert secret["allowedHosts"] == [steward.fixture_host] and "value" not in secret
    assert name in [a["name"] for a in operator.connections.list().data]
    # Another environment sees no such account.
    assert name not in [a["name"] for a in other_operator.connections.list().data]
    expect(lambda: other_operator.connections.check(name), status=404, code="NOT_FOUND")
    expect(lambda: other_operator.connections.reconnect(name, api_key=new_key(steward)),
           status=404, code="NOT_FOUND")

    # The account is a credential an action uses: one committed refund at the fixture.
    action = f"conn-refund-{pysecrets.token_hex(3)}"
    operator.actions.create(name=action, adapter={
        "type": "stripe.refund", "credentialSecret": name,
        "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                   "baseUrl": steward.fixture_url}})
    before = steward.fixture_writes()
    inv = operator.actions.invoke(action, {"paymentIntent": "pi_" + pysecrets.token_hex(8),
                                           "amount": 300}).data
    assert inv["status"] == "succeeded", inv
    assert steward.fixture_writes() == before + 1


def test_a_key_the_provider_refuses_or_cannot_check_is_not_stored(
        steward: Steward, operator_once: anlyon.Client, agent: anlyon.Client,
        key_checks: Steward) -> None:
    name = new_name()
    refused = "not_a_provider_key_" + pysecrets.token_hex(4)
    steward.secret_values.append(refused)
    err = expect(lambda: operator_once.connections.connect_with_api_key(
        integration_id=FIXTURE_INTEGRATION, secret_name=name, api_key=refused),
        status=422, code="CONNECTION_KEY_REJECTED")
    assert err.details == {"integrationId": FIXTURE_INTEGRATION}
    assert refused not in str(err)
    expect(lambda: operator_once.secrets.get(name), status=404, code="NOT_FOUND")

    key_checks.set_key_check_fault("error")
    expect(lambda: operator_once.connections.connect_with_api_key(
        integration_id=FIXTURE_INTEGRATION, secret_name=name, api_key=new_key(steward)),
        status=502, code="CONNECTION_KEY_CHECK_FAILED")
    key_checks.set_key_check_fault("hold", ms=6000)
    expect(lambda: operator_once.connections.connect_with_api_key(
        integration_id=FIXTURE_INTEGRATION, secret_name=name, api_key=new_key(steward)),
        status=502, code="CONNECTION_KEY_CHECK_FAILED")
    expect(lambda: operator_once.secrets.get(name), status=404, code="NOT_FOUND")
    assert name not in [a["name"] for a in operator_once.connections.list().data]

    # Validation names the field; the agent may not connect.
    bad = expect(lambda: operator_once.connections.connect_with_api_key(
        integration_id="no-such-integration", secret_name=name, api_key=new_key(steward)),
        status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "integrationId"
    bad = expect(lambda: operator_once.connections.connect_with_api_key(
        integration_id=FIXTURE_INTEGRATION, secret_name="lower-case", api_key=new_key(steward)),
        status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "secretName"
    expect(lambda: agent.connections.connect_with_api_key(
        integration_id=FIXTURE_INTEGRATION, secret_name=name, api_key=new_key(steward)),
        status=403, code="FORBIDDEN")
    expect(lambda: agent.connections.list(), status=403, code="FORBIDDEN")

    # A secret of the same name that is not this integration's account is not overwritten.
    plain_value = "plain_secret_value_" + pysecrets.token_hex(8)
    steward.secret_values.append(plain_value)
    operator_once.secrets.put(name, value=plain_value, allowed_hosts=[steward.fixture_host])
    expect(lambda: operator_once.connections.connect_with_api_key(
        integration_id=FIXTURE_INTEGRATION, secret_name=name, api_key=new_key(steward)),
        status=409, code="already_exists")
    assert operator_once.secrets.get(name).data["version"] == 1
    operator_once.secrets.delete(name)


def test_check_records_needs_reauth_and_reconnect_makes_the_account_work_again(
        steward: Steward, operator_once: anlyon.Client, key_checks: Steward) -> None:
    key, name = new_key(steward), new_name()
    operator_once.connections.connect_with_api_key(
        integration_id=FIXTURE_INTEGRATION, secret_name=name, api_key=key)
    assert operator_once.connections.check(name).data["health"]["status"] == "healthy"

    # A check that cannot be made is an error and changes nothing.
    key_checks.set_key_check_fault("error")
    expect(lambda: operator_once.connections.check(name),
           status=502, code="CONNECTION_KEY_CHECK_FAILED")
    steward.revoke_provider_key(key)
    checked = operator_once.connections.check(name).data
    assert checked["health"]["status"] == "needs_reauth"
    assert "refused" in checked["health"]["reason"] and key not in checked["health"]["reason"]
    listed = {a["name"]: a for a in operator_once.connections.list().data}
    assert listed[name]["health"]["status"] == "needs_reauth"

    # Reconnect checks the new key first: a refused one changes nothing.
    refused = "rejected_key_" + pysecrets.token_hex(8)
    steward.secret_values.append(refused)
    expect(lambda: operator_once.connections.reconnect(name, api_key=refused),
           status=422, code="CONNECTION_KEY_REJECTED")
    bad = expect(lambda: operator_once.connections.reconnect(name),
                 status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "apiKey"
    version = operator_once.secrets.get(name).data["version"]
    done = operator_once.connections.reconnect(name, api_key=new_key(steward)).data
    assert done["status"] == "completed"
    assert done["connection"]["health"] == {**done["connection"]["health"], "status": "healthy",
                                            "reason": None}
    assert operator_once.secrets.get(name).data["version"] == version + 1
    assert operator_once.connections.check(name).data["health"]["status"] == "healthy"
    expect(lambda: operator_once.connections.check("NO_SUCH_ACCOUNT"),
           status=404, code="NOT_FOUND")

    # A secret deleted is no longer an account.
    operator_once.secrets.delete(name)
    assert name not in [a["name"] for a in operator_once.connections.list().data]
    expect(lambda: operator_once.connections.check(name), status=404, code="NOT_FOUND")
