"""OpenTelemetry export: `steward serve --otlp-endpoint` sends Steward's spans over OTLP/HTTP
(protobuf) to a receiver on loopback built on the official definitions (`opentelemetry-proto`).

One invoke naming a run arrives as nested spans (request -> invoke -> store, dispatch -> store)
under the run's trace id; finished ingested run spans arrive under it too; and a collector that
is down never fails or slows an invoke (the provider write is counted at the fixture).
"""

from __future__ import annotations

import hashlib
import secrets as pysecrets
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from conftest import LOOPBACK, STRIPE_SECRET_NAME, STRIPE_SECRET_VALUE, running_steward

ARRIVAL_TIMEOUT_S = 15.0


class Receiver:
    """An OTLP/HTTP traces receiver on loopback that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.add(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, request: ExportTraceServiceRequest) -> None:
        with self.lock:
            for resource in request.resource_spans:
                service = {a.key: a.value.string_value for a in resource.resource.attributes}
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        self.spans.append({
                            "service": service.get("service.name"),
                            "trace": span.trace_id.hex(),
                            "id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "name": span.name,
                            "attributes": {a.key: a.value for a in span.attributes},
                        })

    def wait_for(self, predicate) -> list[dict[str, Any]]:
        deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
        while time.monotonic() < deadline:
            with self.lock:
                spans = list(self.spans)
            if predicate(spans):
                return spans
            time.sleep(0.1)
        with self.lock:
            return list(self.spans)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def root_span_id(run_id: str, span: str = "") -> str:
    return hashlib.sha256(run_id.encode() + b"\0" + span.encode()).digest()[:8].hex()


def setup_refund(state) -> tuple[Any, str]:
    operator = state.client(state.keys["operator"])
    agent = state.client(state.keys["agent"])
    operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                         allowed_hosts=[state.fixture_host])
    name = "otlp-refund"
    operator.actions.create(name=name, adapter={
        "type": "stripe.refund",
        "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                   "baseUrl": state.fixture_url},
        "credentialSecret": STRIPE_SECRET_NAME,
    })
    return agent, name


def refund() -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": 1000}


def test_an_invoke_naming_a_run_exports_nested_spans_under_the_runs_trace() -> None:
    receiver = Receiver()
    try:
        with running_steward(["--reconcile-interval-ms", "0", "--otlp-endpoint", receiver.url]) as state:
            agent, action = setup_refund(state)
            run = agent.runs.start(name="traced", user_id="u1").data
            before = state.fixture_writes()
            inv = agent.actions.invoke(action, refund(), run_id=run["id"]).data
            assert inv["status"] == "succeeded"
            assert state.fixture_writes() == before + 1
            agent.runs.ingest_spans(run["id"], [
                {"id": "plan", "name": "plan", "type": "model_call",
                 "startedAt": "2026-01-01T00:00:00Z", "endedAt": "2026-01-01T00:00:01Z"},
                {"id": "open", "name": "still running", "type": "workflow_step"},
            ])
            trace = run["traceId"]

            def complete(spans: list[dict[str, Any]]) -> bool:
                names = {s["name"] for s in spans if s["trace"] == trace}
                return {"steward.request", "steward.invoke", "steward.store",
                        "steward.dispatch", "plan"} <= names

            spans = [s for s in receiver.wait_for(complete) if s["trace"] == trace]
            names = sorted(s["name"] for s in spans)
            assert complete(spans), names
            assert all(s["service"] == "steward" for s in spans)
            by_id = {s["id"]: s for s in spans}
            [request] = [s for s in spans if s["name"] == "steward.request"
                         and s["parent"] == root_span_id(run["id"])]
            [invoke] = [s for s in spans if s["name"] == "steward.invoke"]
            assert invoke["parent"] == request["id"], "request -> invoke"
            stores = {s["attributes"]["operation"].string_value: s for s in spans
                      if s["name"] == "steward.store"}
            assert stores["submit_and_begin"]["parent"] == invoke["id"], "invoke -> store"
            [dispatch] = [s for s in spans if s["name"] == "steward.dispatch"]
            assert dispatch["parent"] == invoke["id"], "invoke -> dispatch"
            assert stores["record_answer"]["parent"] == dispatch["id"], "dispatch -> store"
            [plan] = [s for s in spans if s["name"] == "plan"]
            assert plan["id"] == root_span_id(run["id"], "plan")
            assert plan["parent"] == root_span_id(run["id"])
            assert "still running" not in names, "an unfinished span is exported when it ends"
            assert plan["parent"] not in by_id or by_id[plan["parent"]]["trace"] == trace
    finally:
        receiver.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def test_a_collector_that_is_down_never_fails_or_slows_an_invoke() -> None:
    dead = f"http://{LOOPBACK}:{free_port()}"
    with running_steward(["--reconcile-interval-ms", "0", "--otlp-endpoint", dead]) as state:
        agent, action = setup_refund(state)
        run = agent.runs.start(name="untraced").data
        before = state.fixture_writes()
        for _ in range(5):
            started = time.monotonic()
            inv = agent.actions.invoke(action, refund(), run_id=run["id"]).data
            assert inv["status"] == "succeeded"
            assert time.monotonic() - started < 2.0, "export never waits for the collector"
        assert state.fixture_writes() == before + 5
        assert agent.runs.ingest_spans(run["id"], [
            {"name": "done", "startedAt": "2026-01-01T00:00:00Z",
             "endedAt": "2026-01-01T00:00:01Z"}]).data["created"] == 1
