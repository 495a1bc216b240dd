"""An OpenAPI document whose references loop is refused, and the server stays up (issue #30 item 1).

A request body, parameter, response, header, example or path item that refers to itself, directly
or through others, used to overflow the stack while the import followed it and abort the whole
process. Here the official SDK's `actions.import_openapi` sends the three documents the probe
used, then a seeded batch of generated ones: every reference kind, cycles of one to four
components, entered from the place an operation really uses that kind, as a dry run or not. Each
must answer 400 `VALIDATION_ERROR` naming the cycle, and the server must answer the next request.
The server is this module's own, so an abort here is not blamed on another test.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import anlyon
import httpx
import pytest
from anlyon import AnlyonError

from conftest import Steward, running_steward

# How many generated documents one run sends (bounded by count, not time).
GENERATED_DOCUMENTS = 64
SEED = 30_1


@pytest.fixture(scope="module")
def server() -> Iterator[Steward]:
    with running_steward(["--reconcile-interval-ms", "0"]) as state:
        yield state


@pytest.fixture(scope="module")
def operator(server: Steward) -> anlyon.Client:
    return server.client(server.keys["operator"])


def ref(kind: str, index: int) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/C{index}"}


def cycle(kind: str, length: int) -> dict[str, Any]:
    """`C0 -> C1 -> ... -> C0` among the components of `kind`."""
    return {f"C{i}": ref(kind, (i + 1) % length) for i in range(length)}


def document(kind: str, length: int, entry: int) -> dict[str, Any]:
    """A 3.1 document whose one operation enters a reference cycle of `kind` where an operation
    uses that kind for real."""
    use = ref(kind, entry % length)
    operation: dict[str, Any] = {"operationId": "createThing", "responses": {"200": {"description": "ok"}}}
    paths: dict[str, Any] = {"/things": {"post": operation}}
    if kind == "requestBodies":
        operation["requestBody"] = use
    elif kind == "parameters":
        operation["parameters"] = [use]
    elif kind == "responses":
        operation["responses"] = {"200": use}
    elif kind == "headers":
        operation["responses"] = {"200": {"description": "ok", "headers": {"X-Thing": use}}}
    elif kind == "examples":
        operation["requestBody"] = {"content": {"application/json": {
            "schema": {"type": "object"}, "examples": {"one": use}}}}
    elif kind == "schemas":
        operation["requestBody"] = {"content": {"application/json": {"schema": use}}}
    elif kind == "pathItems":
        paths["/loop"] = use
    else:
        raise AssertionError(kind)
    return {"openapi": "3.1.0", "info": {"title": "cycles", "version": "1"}, "paths": paths,
            "components": {kind: cycle(kind, length)}}


KINDS = ["requestBodies", "parameters", "responses", "headers", "examples", "schemas", "pathItems"]


def assert_refused_and_alive(server: Steward, operator: anlyon.Client, spec: dict[str, Any],
                             dry_run: bool) -> str:
    with pytest.raises(AnlyonError) as caught:
        operator.actions.import_openapi(spec, base_url=server.fixture_url, dry_run=dry_run)
    err = caught.value
    assert err.status == 400 and err.code == "VALIDATION_ERROR", (err.status, err.code, str(err))
    assert "reference cycle" in str(err) or "reference cycle" in repr(err.details), err
    field = err.details["field"]
    assert field.startswith("spec.components."), field
    # The process is still there: a plain read answers.
    health = httpx.get(server.url + "/healthz", timeout=5)
    assert health.status_code == 200, health.text
    return field


@pytest.mark.parametrize("name,spec", [
    ("requestBody R -> R", document("requestBodies", 1, 0)),
    ("parameter P -> P", document("parameters", 1, 0)),
    ("requestBodies A -> B -> A", document("requestBodies", 2, 1)),
])
def test_the_probes_documents_are_refused_and_the_server_lives(
        server: Steward, operator: anlyon.Client, name: str, spec: dict[str, Any]) -> None:
    for dry_run in (True, False):
        field = assert_refused_and_alive(server, operator, spec, dry_run)
        assert field.startswith("spec.components."), (name, field)
    # Nothing was created by a refused import.
    assert not [a for a in operator.actions.list().data if a["name"].startswith("create")]


def test_generated_cycles_of_every_kind_are_refused_and_the_server_lives(
        server: Steward, operator: anlyon.Client) -> None:
    rng = random.Random(SEED)
    seen: set[str] = set()
    for _ in range(GENERATED_DOCUMENTS):
        kind = rng.choice(KINDS)
        length = rng.randint(1, 4)
        spec = document(kind, length, rng.randrange(length))
        field = assert_refused_and_alive(server, operator, spec, rng.random() < 0.5)
        assert field.startswith(f"spec.components.{kind}.C"), (kind, length, field)
        seen.add(kind)
    assert seen == set(KINDS), f"the seed left out {set(KINDS) - seen}"


def test_a_document_without_cycles_still_imports(server: Steward, operator: anlyon.Client) -> None:
    """The check refuses loops only: a chain of aliases that lands on a value imports."""
    spec = document("requestBodies", 1, 0)
    spec["components"]["requestBodies"] = {
        "C0": {"$ref": "#/components/requestBodies/C1"},
        "C1": {"content": {"application/json": {"schema": {
            "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}},
    }
    result = operator.actions.import_openapi(spec, base_url=server.fixture_url, dry_run=True).data
    assert [c["name"] for c in result["created"]] == ["createThing"] or result["created"], result
