"""What a key may do is what it was given: only a key that can decide approvals signs in to the
operator console (an agent's or a read-only key is refused, with a page that says why, and gets
no session), and a preview binds only the key that asked for it (another key of the same
environment is refused with `preview_other_key`, nothing recorded, no provider write).

The console is driven over plain HTTP (a form POST to the sign-in and a GET of the inbox), so
the check does not depend on a browser.
"""

from __future__ import annotations

import secrets as pysecrets
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import anlyon
import pytest
from anlyon import AnlyonError

from conftest import Steward, create_key


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_RAW = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def request(url: str, *, data: dict[str, str] | None = None,
            cookie: str | None = None) -> tuple[int, dict[str, str], str]:
    """One request without following redirects: (status, headers, body)."""
    body = None if data is None else urllib.parse.urlencode(data).encode()
    headers = {"Cookie": cookie} if cookie else {}
    req = urllib.request.Request(url, data=body, headers=headers,
                                 method="POST" if body is not None else "GET")
    try:
        with _RAW.open(req, timeout=10) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()


def sign_in(steward: Steward, key: str) -> tuple[int, dict[str, str], str]:
    return request(steward.url + "/console/login", data={"key": key})


def test_only_a_key_that_can_decide_approvals_signs_in_to_the_console(
        steward: Steward, agent: anlyon.Client) -> None:
    # Something to decide, so a console that offered decisions would show the forms.
    parked = agent.approvals.request(title="console scope check").data["id"]
    for name in ("agent", "readonly"):
        status, headers, body = sign_in(steward, steward.keys[name])
        assert status == 403, (name, status, headers.get("location"))
        assert "set-cookie" not in headers, f"the {name} key got a session"
        assert "approvals:decide" in body and 'role="alert"' in body, body
        assert 'action="/console/approvals/' not in body

    status, headers, _ = sign_in(steward, steward.keys["operator"])
    assert status == 303 and headers["location"] == "/console/", (status, headers)
    cookie = headers["set-cookie"].split(";", 1)[0]
    status, _, inbox = request(steward.url + "/console/", cookie=cookie)
    assert status == 200 and parked in inbox
    assert f'action="/console/approvals/{parked}/approve"' in inbox, "the operator decides"


def paid_intent(steward: Steward, amount: int = 5000) -> str:
    pi = "pi_" + pysecrets.token_hex(8)
    steward._fixture("POST", "/_fixture/payment_intents", {"id": pi, "amount": amount, "currency": "usd"})
    return pi


def test_a_preview_binds_only_the_key_that_asked_for_it(
        steward: Steward, agent: anlyon.Client, refund_action: dict[str, Any]) -> None:
    # Another agent key of the same environment as `agent`.
    other = steward.client(create_key(steward.data_dir, "sdk-main", "preview-other", role="agent"))
    action = refund_action["name"]
    refund = {"paymentIntent": paid_intent(steward), "amount": 700}
    preview = agent.actions.preview(action, refund).data
    before = steward.fixture_writes()

    for call in (lambda: other.actions.invoke(action, refund, preview_id=preview["id"]),
                 lambda: other.actions.invoke(action, refund, preview_id=preview["id"],
                                              operation_key="other-" + pysecrets.token_hex(4)),
                 lambda: other.actions.refresh_preview(preview["id"])):
        with pytest.raises(AnlyonError) as caught:
            call()
        assert caught.value.status == 403 and caught.value.code == "preview_other_key", caught.value
    assert steward.fixture_writes() == before, "another key's invoke wrote"
    # Nothing was recorded: the preview is still unbound and not superseded.
    seen = agent.actions.get_preview(preview["id"]).data
    assert seen["status"] == "active" and seen["effectId"] is None and seen["supersededBy"] is None
    # Reading it stays open to the environment, as every read is.
    assert other.actions.get_preview(preview["id"]).data["id"] == preview["id"]

    # The key that asked for it binds it, once.
    invoked = agent.actions.invoke(action, refund, preview_id=preview["id"]).data
    assert invoked["status"] == "succeeded", invoked
    assert steward.fixture_writes() == before + 1
