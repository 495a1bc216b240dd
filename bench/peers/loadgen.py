"""The load shape every Python peer driver shares, the same as `steward bench` workload (a).

For each concurrency level: one unrecorded warm-up request per worker, then `concurrency`
workers share a request counter and a deadline (and an optional request cap); each request is
a new operation key. The fixture's write count is read before and after, so every result says
how many provider writes the work really made. Raw latencies are written to a JSON file;
bench/report.py computes every system's statistics the same way.
"""

import asyncio
import http.client
import itertools
import json
import sys
import threading
import time
from urllib.parse import urlsplit

SECRET = "sk_test_bench"


def parse_args(argv):
    """out.json levels duration_s requests_max(0 = none) run_id fixture_url"""
    out, levels, duration, requests, run, fixture = argv[1:7]
    return {
        "out": out,
        "levels": [int(c) for c in levels.split(",")],
        "duration": float(duration),
        "requests": int(requests) or None,
        "run": run,
        "fixture": fixture.rstrip("/"),
    }


class Fixture:
    """Keep-alive HTTP to the fixture, one connection per thread."""

    def __init__(self, url):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.local = threading.local()

    def _conn(self):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            self.local.conn = conn
        return conn

    def request(self, method, path, body=None, headers=None):
        for attempt in (0, 1):
            conn = self._conn()
            try:
                conn.request(method, path, body=body, headers=headers or {})
                response = conn.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A kept-alive connection the server closed between requests: reconnect once.
                conn.close()
                self.local.conn = None
                if attempt:
                    raise

    def refund(self, key, payment_intent, amount):
        """POST /v1/refunds under the operation key; the refund's id, or an exception."""
        status, body = self.request(
            "POST",
            "/v1/refunds",
            body=f"payment_intent={payment_intent}&amount={amount}&currency=usd",
            headers={
                "Authorization": f"Bearer {SECRET}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Idempotency-Key": key,
            },
        )
        if status != 200:
            raise RuntimeError(f"fixture answered {status}: {body[:200]!r}")
        return json.loads(body)["id"]

    def writes(self):
        status, body = self.request("GET", "/_fixture/writes")
        return json.loads(body)["total"]


def _result(system, concurrency, lat, errors, first_error, seconds, writes):
    print(
        f"{system} c={concurrency}: {len(lat)} ok, {errors} errors, {len(lat) / seconds:.1f}/s",
        file=sys.stderr,
        flush=True,
    )
    return {
        "system": system,
        "concurrency": concurrency,
        "ok": len(lat),
        "errors": errors,
        "firstError": first_error,
        "seconds": seconds,
        "writes": writes,
        "latenciesUs": lat,
    }


def run_threads(system, args, op, fixture):
    """`op(key, n)` runs one operation on the calling thread."""
    results = []
    for c in args["levels"]:
        for phase, cap in (("w", c), ("m", args["requests"])):
            counter = itertools.count()
            lock = threading.Lock()
            lat, errs = [], []
            started = time.perf_counter()

            def worker():
                while True:
                    with lock:
                        n = next(counter)
                    if (cap is not None and n >= cap) or time.perf_counter() - started >= args["duration"]:
                        return
                    key = f"{system}-{args['run']}-c{c}-{phase}{n}"
                    sent = time.perf_counter()
                    try:
                        op(key, n)
                        took = int((time.perf_counter() - sent) * 1e6)
                        with lock:
                            lat.append(took)
                    except Exception as e:  # a failed request is counted, never retried
                        with lock:
                            errs.append(repr(e))

            if phase == "m":
                before = fixture.writes()
                started = time.perf_counter()
            threads = [threading.Thread(target=worker) for _ in range(c)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - started
            if phase == "m":
                writes = fixture.writes() - before
                results.append(_result(system, c, lat, len(errs), errs[0] if errs else None, seconds, writes))
    return results


async def run_async(system, args, op, fixture):
    """`await op(key, n)` runs one operation."""
    results = []
    for c in args["levels"]:
        for phase, cap in (("w", c), ("m", args["requests"])):
            counter = itertools.count()
            lat, errs = [], []
            if phase == "m":
                before = await asyncio.to_thread(fixture.writes)
            started = time.perf_counter()

            async def worker():
                while True:
                    n = next(counter)
                    if (cap is not None and n >= cap) or time.perf_counter() - started >= args["duration"]:
                        return
                    key = f"{system}-{args['run']}-c{c}-{phase}{n}"
                    sent = time.perf_counter()
                    try:
                        await op(key, n)
                        lat.append(int((time.perf_counter() - sent) * 1e6))
                    except Exception as e:  # a failed request is counted, never retried
                        errs.append(repr(e))

            await asyncio.gather(*(worker() for _ in range(c)))
            seconds = time.perf_counter() - started
            if phase == "m":
                writes = await asyncio.to_thread(fixture.writes) - before
                results.append(_result(system, c, lat, len(errs), errs[0] if errs else None, seconds, writes))
    return results


def save(path, results):
    with open(path, "w") as f:
        json.dump(results, f)
