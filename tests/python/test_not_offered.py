"""SDK calls Steward does not serve answer honestly: a 404 or 405 envelope saying the route is not
here, never a 200 that pretends, and never a record-style 404 a caller could mistake for a
missing record. Each choice is in docs/DECISIONS.md (the event stream and webhooks; budgets
and billing). Consent sessions for connected accounts are served: test_oauth_connections.py."""

from __future__ import annotations

from typing import Any, Callable

import anlyon
import pytest
from anlyon import AnlyonError

NOT_SERVED: list[tuple[str, Callable[[anlyon.Client], Any]]] = [
    ("events.publish", lambda c: c.events.publish(topic="environment", type="custom.thing", data={"x": 1})),
    ("events.list", lambda c: c.events.list()),
    ("events.get", lambda c: c.events.get("evt_1")),
    ("events.create_topic", lambda c: c.events.create_topic(name="orders")),
    ("events.update_topic", lambda c: c.events.update_topic("environment", name="x")),
    ("events.delete_topic", lambda c: c.events.delete_topic("environment")),
]


@pytest.mark.parametrize("name,call", NOT_SERVED, ids=[n for n, _ in NOT_SERVED])
def test_unserved_calls_say_the_route_is_not_here(operator: anlyon.Client, name: str,
                                                  call: Callable[[anlyon.Client], Any]) -> None:
    with pytest.raises(AnlyonError) as caught:
        call(operator)
    assert (caught.value.status, caught.value.code) in {
        (404, "ROUTE_NOT_FOUND"), (405, "METHOD_NOT_ALLOWED"),
    }, (name, caught.value.status, caught.value.code)
