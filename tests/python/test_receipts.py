"""Signed receipts (docs/RECEIPTS.md), checked by an implementation written here from the spec.

The verifier below uses only `rfc8785` (RFC 8785 canonical JSON) and `cryptography` (Ed25519)
from PyPI, nothing of Steward's: a receipt verifies when its signature over the canonical bytes
of the receipt without `signature` checks under the public key its `keyId` names, and a chain
when each receipt's `previousDigest` is the SHA-256 of the canonical bytes of the one before.
Every settlement gets its receipt: a success, an `unknown` and its later resolution, an
approved call (naming its approver) and a denial. A one-byte change or a removed receipt fails
here and in `steward receipt verify`, which runs with no server to talk to.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets as pysecrets
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import anlyon
import pytest
import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from conftest import CLI_TIMEOUT_S, Steward, _DIRECT, child_env, create_key, steward_bin

GENESIS = "sha256:" + "0" * 64
# How long a settlement may wait for its receipt (sealed, then issued, in the background).
RECEIPT_WAIT_S = 20.0
POLL_S = 0.1


# -- the independent verifier ---------------------------------------------------------------------

class NotVerified(Exception):
    pass


def key_id(public_hex: str) -> str:
    return "rk_" + hashlib.sha256(bytes.fromhex(public_hex)).hexdigest()[:16]


def digest(receipt: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(receipt)).hexdigest()


def verify(receipt: dict[str, Any], public_keys: list[str]) -> None:
    keys = {key_id(k): Ed25519PublicKey.from_public_bytes(bytes.fromhex(k)) for k in public_keys}
    unsigned = {k: v for k, v in receipt.items() if k != "signature"}
    key = keys.get(receipt.get("keyId"))
    if key is None:
        raise NotVerified(f"unknown key {receipt.get('keyId')}")
    try:
        key.verify(bytes.fromhex(receipt["signature"]), rfc8785.dumps(unsigned))
    except (InvalidSignature, ValueError) as e:
        raise NotVerified(f"bad signature on sequence {receipt.get('sequence')}") from e


def verify_chain(receipts: list[dict[str, Any]], public_keys: list[str]) -> None:
    previous: dict[str, Any] | None = None
    for r in receipts:
        verify(r, public_keys)
        if previous is None:
            if r["sequence"] == 1 and r["previousDigest"] != GENESIS:
                raise NotVerified("the first receipt does not follow genesis")
        else:
            if r["environmentId"] != previous["environmentId"]:
                raise NotVerified("two environments in one chain")
            if r["sequence"] != previous["sequence"] + 1:
                raise NotVerified(f"sequence {r['sequence']} follows {previous['sequence']}")
            if r["previousDigest"] != digest(previous):
                raise NotVerified(f"sequence {r['sequence']} does not link to the one before")
        previous = r


# -- reading ------------------------------------------------------------------------------------

def get(steward: Steward, path: str, key: str | None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(steward.url + path, headers=headers)
    with _DIRECT.open(request, timeout=10) as response:
        return json.loads(response.read())


def public_keys(steward: Steward) -> list[str]:
    """From the well-known path, with no key; the API path must say the same."""
    known = get(steward, "/.well-known/steward-receipt-keys.json", None)["data"]
    api = get(steward, "/api/v2/receipts/public-keys", steward.keys["readonly"])["data"]
    assert known == api and known, known
    assert all(k["algorithm"] == "Ed25519" and k["keyId"] == key_id(k["publicKey"]) for k in known)
    assert [k["current"] for k in known].count(True) == 1
    return [k["publicKey"] for k in known]


def receipts_of(steward: Steward, key: str, effect_id: str, count: int) -> list[dict[str, Any]]:
    """The effect's receipts once there are `count` of them (a bounded wait)."""
    deadline = time.monotonic() + RECEIPT_WAIT_S
    while True:
        found = get(steward, f"/api/v2/actions/effects/{effect_id}/receipts", key)["data"]
        if len(found) >= count or time.monotonic() > deadline:
            assert len(found) == count, f"expected {count} receipts of {effect_id}, got {found}"
            return found
        time.sleep(POLL_S)


def chain(steward: Steward, key: str) -> list[dict[str, Any]]:
    """The environment's whole chain, page after page."""
    out: list[dict[str, Any]] = []
    cursor = ""
    while True:
        page = get(steward, f"/api/v2/receipts?limit=2{cursor}", key)
        out += page["data"]
        if not page["pagination"]["hasMore"]:
            return out
        cursor = "&cursor=" + page["pagination"]["nextCursor"]


def refund_input() -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": 700}


def cli_verify(tmp_path: Path, name: str, receipts: Any, keys: list[str]) -> subprocess.CompletedProcess:
    """`steward receipt verify`, offline: a file and the keys, no server address, no store."""
    path = tmp_path / name
    path.write_text(receipts if isinstance(receipts, str) else json.dumps(receipts))
    args = [str(steward_bin()), "receipt", "verify", str(path)]
    for k in keys:
        args += ["--public-key", k]
    env = {k: v for k, v in child_env().items() if k not in ("STEWARD_URL", "STEWARD_API_KEY")}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=CLI_TIMEOUT_S,
                          stdin=subprocess.DEVNULL, cwd=tmp_path)


# -- the tests ----------------------------------------------------------------------------------

def test_a_settled_effect_gets_a_receipt_an_independent_implementation_verifies(
        steward: Steward, agent: anlyon.Client, refund_action: dict[str, Any]) -> None:
    key = steward.keys["agent"]
    refund = refund_input()
    inv = agent.actions.invoke("refund-payment", refund).data
    assert inv["status"] == "succeeded", inv
    [receipt] = receipts_of(steward, key, inv["effectId"], 1)
    keys = public_keys(steward)
    verify(receipt, keys)
    assert get(steward, f"/api/v2/actions/effects/{inv['effectId']}/receipt", key)["data"] == receipt

    assert receipt["type"] == "steward.receipt.v1"
    assert receipt["effectId"] == inv["effectId"] and receipt["invocationId"] == inv["id"]
    assert receipt["actionId"] == refund_action["id"] and receipt["actionName"] == "refund-payment"
    assert receipt["actionVersion"] == 1
    settlement = receipt["settlement"]
    assert settlement["from"] == "dispatching" and settlement["state"].startswith("succeeded_")
    assert settlement["outcome"] == "succeeded" and settlement["status"] == "succeeded"
    assert receipt["request"]["attempt"] == 1 and receipt["request"]["digest"].startswith("sha256:")
    provider = receipt["provider"]
    assert provider["responseStatus"] == 200 and provider["reference"].startswith("re_"), provider
    assert provider["responseDigest"].startswith("sha256:")
    assert receipt["approval"] is None and receipt["editedInputDigest"] is None
    # The input digest is the invocation's own fingerprint of what it was called with.
    assert receipt["inputDigest"].startswith("sha256:")


def test_an_unknown_effect_and_its_resolution_each_get_a_receipt_in_one_chain(
        faults: Steward, agent: anlyon.Client, refund_action: dict[str, Any]) -> None:
    key = faults.keys["agent"]
    faults.set_fault("drop_after_commit")
    inv = agent.actions.invoke("refund-payment", refund_input()).data
    faults.clear_faults()
    assert inv["status"] == "unknown", inv
    [first] = receipts_of(faults, key, inv["effectId"], 1)
    assert first["settlement"]["state"] == "unknown" and first["settlement"]["outcome"] == "unknown"
    assert first["provider"]["responseStatus"] is None

    assert agent.actions.reconcile_effect(inv["effectId"]).data["outcome"] == "succeeded"
    first_again, second = receipts_of(faults, key, inv["effectId"], 2)
    assert first_again == first, "a receipt never changes once issued"
    assert second["settlement"]["from"] == "unknown"
    assert second["settlement"]["outcome"] == "succeeded"
    assert second["sequence"] > first["sequence"]

    keys = public_keys(faults)
    whole = chain(faults, key)
    verify_chain(whole, keys)
    assert whole[0]["sequence"] == 1 and whole[0]["previousDigest"] == GENESIS
    assert first in whole and second in whole


def test_an_approved_call_names_its_approver_and_a_denial_gets_a_receipt(
        steward: Steward, agent: anlyon.Client, operator: anlyon.Client, stripe_secret: str) -> None:
    name = "refund-gated-receipts"
    operator.actions.create(
        name=name, requires_approval=True,
        adapter={"type": "stripe.refund",
                 "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                            "baseUrl": steward.fixture_url},
                 "credentialSecret": stripe_secret})
    key = steward.keys["agent"]
    approved = agent.actions.invoke(name, refund_input()).data
    assert approved["status"] == "pending_approval", approved
    operator.approvals.approve(approved["approvalId"], note="looks right")
    [receipt] = receipts_of(steward, key, approved["effectId"], 1)
    verify(receipt, public_keys(steward))
    approval = receipt["approval"]
    assert approval["id"] == approved["approvalId"] and approval["status"] == "approved"
    [decision] = approval["decisions"]
    assert decision["decision"] == "approve" and decision["keyName"] == "sdk-operator"
    assert decision["keyId"].startswith("key_") and "note" not in decision
    assert receipt["settlement"]["outcome"] == "succeeded"

    denied = agent.actions.invoke(name, refund_input()).data
    operator.approvals.deny(denied["approvalId"], note="no")
    [receipt] = receipts_of(steward, key, denied["effectId"], 1)
    verify(receipt, public_keys(steward))
    assert receipt["settlement"]["state"] == "denied" and receipt["request"] is None
    assert receipt["approval"]["decisions"][0]["decision"] == "deny"


def test_a_changed_byte_or_a_removed_receipt_fails_here_and_in_the_cli(
        steward: Steward, agent: anlyon.Client, refund_action: dict[str, Any],
        tmp_path: Path) -> None:
    key = steward.keys["agent"]
    for _ in range(3):
        inv = agent.actions.invoke("refund-payment", refund_input()).data
        receipts_of(steward, key, inv["effectId"], 1)
    keys = public_keys(steward)
    whole = chain(steward, key)
    assert len(whole) >= 4
    verify_chain(whole, keys)
    done = cli_verify(tmp_path, "chain.json", whole, keys)
    assert done.returncode == 0, done.stderr
    assert f"sequence 1 to {whole[-1]['sequence']}" in done.stdout, done.stdout
    jsonl = "\n".join(json.dumps(r) for r in whole) + "\n"
    assert cli_verify(tmp_path, "chain.jsonl", jsonl, keys).returncode == 0
    one = cli_verify(tmp_path, "one.json", whole[2], keys)
    assert one.returncode == 0 and "continuing a chain at sequence 3" in one.stdout, one.stdout

    # One byte: one character of the effect id changes, nothing else.
    text = json.dumps(whole[1], sort_keys=True)
    changed_at = text.index('"effectId": "') + len('"effectId": "') + 10
    flipped = "0" if text[changed_at] != "0" else "1"
    tampered_text = text[:changed_at] + flipped + text[changed_at + 1:]
    assert len(tampered_text) == len(text) and tampered_text != text
    tampered = whole[:1] + [json.loads(tampered_text)] + whole[2:]
    with pytest.raises(NotVerified, match="bad signature"):
        verify_chain(tampered, keys)
    done = cli_verify(tmp_path, "tampered.json", tampered, keys)
    assert done.returncode == 1 and "signature does not match" in done.stderr, done.stderr

    removed = whole[:1] + whole[2:]
    with pytest.raises(NotVerified, match="follows"):
        verify_chain(removed, keys)
    done = cli_verify(tmp_path, "removed.json", removed, keys)
    assert done.returncode == 1 and "missing" in done.stderr, done.stderr

    # Under a key that is not the one the receipts name, nothing verifies.
    wrong = "11" * 32
    done = cli_verify(tmp_path, "wrong-key.json", whole, [wrong])
    assert done.returncode == 1 and "not among the public keys" in done.stderr, done.stderr


def test_rotation_keeps_old_receipts_verifiable(
        steward: Steward, agent: anlyon.Client, refund_action: dict[str, Any],
        tmp_path: Path) -> None:
    key = steward.keys["agent"]
    before = public_keys(steward)
    done = subprocess.run([str(steward_bin()), "keys", "rotate-receipt-key", "--data",
                           str(steward.data_dir)], capture_output=True, text=True,
                          env=child_env(), timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    new_key = done.stdout.strip()
    after = public_keys(steward)
    assert after[:-1] == before and after[-1] == new_key
    printed = subprocess.run([str(steward_bin()), "keys", "receipt-public-key", "--data",
                              str(steward.data_dir)], capture_output=True, text=True,
                             env=child_env(), timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert printed.stdout.strip() == new_key

    inv = agent.actions.invoke("refund-payment", refund_input()).data
    [receipt] = receipts_of(steward, key, inv["effectId"], 1)
    assert receipt["keyId"] == key_id(new_key)
    whole = chain(steward, key)
    verify_chain(whole, after)
    with pytest.raises(NotVerified, match="unknown key"):
        verify_chain(whole, [new_key])
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(get(steward, "/.well-known/steward-receipt-keys.json", None)))
    assert cli_verify(tmp_path, "rotated.json", whole, [str(keys_file)]).returncode == 0


def test_receipts_carry_no_secret(steward: Steward, agent: anlyon.Client,
                                  refund_action: dict[str, Any]) -> None:
    key = steward.keys["agent"]
    agent.actions.invoke("refund-payment", refund_input())
    other = create_key(steward.data_dir, "sdk-main", "receipt-leak-reader", scopes=["actions:read"])
    text = json.dumps(chain(steward, other)) + json.dumps(chain(steward, key))
    assert len(text) > 100
    for value in steward.secret_values:
        for form in (value, json.dumps(value)[1:-1], urllib.parse.quote(value, safe=""),
                     base64.b64encode(value.encode()).decode(),
                     base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")):
            assert form not in text, "a receipt carries a secret value"


def test_receipts_on_the_postgresql_store_verify_and_chain(tmp_path: Path) -> None:
    """The same on a server whose store is PostgreSQL: an unknown and its resolution, chained,
    verified here and by the CLI."""
    from conftest import running_steward
    from recovery_support import fresh_database

    with fresh_database() as url, running_steward(["--reconcile-interval-ms", "0"],
                                                  database=url) as pg:
        operator = pg.client(pg.keys["operator"])
        agent = pg.client(pg.keys["agent"])
        operator.secrets.put("PG_STRIPE_KEY", value="sk_test_" + pysecrets.token_hex(16),
                             allowed_hosts=[pg.fixture_host])
        operator.actions.create(
            name="refund-pg",
            adapter={"type": "stripe.refund",
                     "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                                "baseUrl": pg.fixture_url},
                     "credentialSecret": "PG_STRIPE_KEY"})
        key = pg.keys["agent"]
        pg.set_fault("drop_after_commit")
        inv = agent.actions.invoke("refund-pg", refund_input()).data
        pg.clear_faults()
        assert inv["status"] == "unknown", inv
        assert agent.actions.reconcile_effect(inv["effectId"]).data["outcome"] == "succeeded"
        first, second = receipts_of(pg, key, inv["effectId"], 2)
        assert (first["settlement"]["state"], second["settlement"]["from"]) == ("unknown", "unknown")
        keys = public_keys(pg)
        whole = chain(pg, key)
        verify_chain(whole, keys)
        done = cli_verify(tmp_path, "pg-chain.json", whole, keys)
        assert done.returncode == 0, done.stderr
