"""The floor through the Python client: the fixture called directly, nothing recorded. Shows how
much of a Python peer's latency is the load generator itself."""

import sys

from loadgen import Fixture, parse_args, run_threads, save

args = parse_args(sys.argv)
fixture = Fixture(args["fixture"])
results = run_threads(
    "floor-python", args, lambda key, n: fixture.refund(key, f"pi_{key}", 100 + n % 900), fixture
)
save(args["out"], results)
