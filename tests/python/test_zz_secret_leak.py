"""Runs last (module name sorts after the others): no secret value ever left Steward.

Looks in every response body and header the SDK clients received during the run, in everything
that can be read back now (invocations, effects with evidence, actions and their versions,
secrets, in both environments), in the server's log, and in the data directory on disk.
"""

from __future__ import annotations

from typing import Any

import anlyon

from conftest import Steward

LISTING = 200


def _all_pages(fetch: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = fetch(limit=LISTING, offset=offset)
        items += page.data
        if not page.pagination or not page.pagination.get("hasMore"):
            return items
        offset += LISTING


def _read_back(client: anlyon.Client) -> int:
    fetched = 0
    for inv in _all_pages(client.actions.invocations):
        client.actions.invocation(inv["id"])
        fetched += 1
        if inv.get("effectId"):
            client.actions.effect(inv["effectId"])
    for effect in _all_pages(client.actions.effects):
        client.actions.effect(effect["id"])
    for action in client.actions.list().data:
        client.actions.get(action["id"])
        client.actions.versions(action["id"])
        client.actions.invocations_for(action["id"], limit=LISTING)
    for secret in client.secrets.list().data:
        client.secrets.get(secret["name"])
    client.auth.identity()
    client.environment.get()
    return fetched


def test_no_secret_value_appears_anywhere(steward: Steward, operator: anlyon.Client,
                                          other_operator: anlyon.Client) -> None:
    fetched = _read_back(operator) + _read_back(other_operator)
    assert fetched >= 10, "the run should have produced invocations to inspect"
    values = steward.secret_values
    assert len(values) >= 3 and all(len(v) >= 20 for v in values)

    assert len(steward.recorded) > 100, "the recorder saw the run's responses"
    for seen in steward.recorded:
        for value in values:
            assert value not in seen.body, f"secret value in the body of {seen.method} {seen.url}"
            assert all(value not in h for h in seen.headers.values()), (
                f"secret value in a header of {seen.method} {seen.url}")

    log = steward.server_log.read_text("utf-8", "replace")
    assert "request" in log, "the server log was captured"
    for value in values:
        assert value not in log, "secret value in the server log"

    for path in steward.data_dir.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            for value in values:
                assert value.encode() not in content, f"secret value in plaintext in {path.name}"
