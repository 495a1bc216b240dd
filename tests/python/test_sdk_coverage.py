"""Every method of the SDK's governed core is called by some test in this suite.

`sdk_coverage.py` reads the installed SDK's resources and this directory's tests; a method of the
governed core (actions, approvals, approval policies, impact limits, secrets, environment,
identity, budgets) that no test calls fails here, so a new SDK method cannot go untested.
"""

from sdk_coverage import GOVERNED_CORE, methods, untested


def test_the_sdk_is_read() -> None:
    found = {resource for resource, _, _, _ in methods()}
    assert set(GOVERNED_CORE) <= found, found
    assert len(methods()) > 60


def test_every_governed_core_method_has_a_test() -> None:
    assert untested() == []
