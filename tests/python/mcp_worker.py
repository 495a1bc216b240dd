"""An MCP host stand-in for the crash tests: one business operation (a refund) made through
`steward mcp` over stdio, its operation key persisted before the call, so a restarted worker
resumes the same operation instead of starting a new one.

Usage: python mcp_worker.py STATE_FILE STEWARD_URL TOOL (the agent key in STEWARD_API_KEY).
Prints `persisted`, `calling`, `answered <status>` and `saved` on stdout as it goes; the test
kills it between those lines. With MCP_WORKER_PAUSE_S set, it sleeps that long after
`answered`, before saving (the window between the answer and the local save).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import uuid
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def say(line: str) -> None:
    print(line, flush=True)


def durable_write(path: Path, value: dict) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


async def run(state_path: Path, url: str, tool: str) -> None:
    if state_path.exists():
        state = json.loads(state_path.read_text())
    else:
        state = {"operationKey": f"crash-{uuid.uuid4()}",
                 "input": {"paymentIntent": "pi_" + secrets.token_hex(8), "amount": 700}}
        durable_write(state_path, state)
    say("persisted")
    params = StdioServerParameters(command=os.environ["STEWARD_BIN"],
                                   args=["mcp", "--server", url], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            say("calling")
            result = await session.call_tool(
                tool, {**state["input"], "operationKey": state["operationKey"]})
    envelope = result.structuredContent or {}
    say(f"answered {envelope.get('status')}")
    await asyncio.sleep(float(os.environ.get("MCP_WORKER_PAUSE_S", "0")))
    durable_write(state_path, {**state, "result": envelope})
    say("saved")


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(run(Path(sys.argv[1]), sys.argv[2], sys.argv[3]), 60))
