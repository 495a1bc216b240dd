"""The Python recovery decision against the shared vectors (tests/vectors/recovery-decisions.json,
generated from the Rust table; the Rust test `decide::vectors` reads the same file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from steward_recovery import VECTORS_VERSION, LocalState, ServerView, decide
from steward_recovery.decide import Contradiction, RecoveryAction
from steward_recovery.state import InvocationStatus

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "recovery-decisions.json"
FILE = json.loads(VECTORS.read_text())


def view(v: dict) -> ServerView:
    if v["view"] == "status":
        return ServerView.of(InvocationStatus(v["status"]))
    return ServerView(v["view"])


def action(v: dict) -> RecoveryAction:
    return RecoveryAction(
        v["kind"],
        status=InvocationStatus(v["status"]) if "status" in v else None,
        contradiction=Contradiction(v["contradiction"]) if "contradiction" in v else None,
    )


def test_the_vectors_are_the_version_this_package_implements() -> None:
    assert FILE["version"] == VECTORS_VERSION


def test_the_vectors_cover_every_local_state_and_server_view() -> None:
    assert FILE["local_states"] == [s.value for s in LocalState]
    pairs = {(v["local"], json.dumps(v["server"], sort_keys=True)) for v in FILE["vectors"]}
    assert len(pairs) == len(FILE["vectors"]) == len(LocalState) * len(FILE["server_views"])
    assert len(FILE["server_views"]) == 2 + len(InvocationStatus)


@pytest.mark.parametrize(
    "vector", FILE["vectors"], ids=lambda v: f"{v['local']}-{v['server'].get('status', v['server']['view'])}"
)
def test_decide_matches_the_vector(vector: dict) -> None:
    assert decide(LocalState(vector["local"]), view(vector["server"])) == action(vector["action"])


def test_nothing_is_resent_once_an_outcome_may_exist() -> None:
    for v in FILE["vectors"]:
        got = decide(LocalState(v["local"]), view(v["server"]))
        if got.kind == "dispatch":
            assert v["server"]["view"] == "no_invocation_known", v
            local = LocalState(v["local"])
            assert not local.is_settled() and local is not LocalState.UNKNOWN, v


def test_fingerprints_match_the_shared_vectors() -> None:
    """The Rust side is steward-client's `operation::tests::fingerprints_match_the_shared_vectors`."""
    from steward_recovery import canonical_json, fingerprint

    fingerprints = json.loads((VECTORS.parent / "fingerprints.json").read_text())
    assert fingerprints["version"] == 1 and fingerprints["cases"]
    for case in fingerprints["cases"]:
        assert canonical_json(case["value"]) == case["canonical"], case
        assert fingerprint(case["value"]) == case["fingerprint"], case
