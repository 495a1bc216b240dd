"""The operator console (`/console/`) driven by a real browser: Debian's Chromium through
Playwright (`executable_path=/usr/bin/chromium`, never a downloaded browser).

One server for the module, in its own environment `console`, with the background reconciler
off so that unknown effects stay in the queue until the console settles them. Provider writes
are counted at the fixture. Every page that opens a JavaScript dialog fails the test (the XSS
payloads below must render as text). Screenshots of the inbox, the unknown queue and a timeline
are written to docs/screenshots/.
"""

from __future__ import annotations

import http.server
import json
import secrets as pysecrets
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anlyon
import pytest
from playwright.sync_api import BrowserContext, Page, Playwright, sync_playwright

from conftest import (CLI_TIMEOUT_S, REPO, STRIPE_SECRET_NAME, STRIPE_SECRET_VALUE, Steward,
                      child_env, create_key, running_steward, steward_bin)

CHROMIUM = "/usr/bin/chromium"
ENV = "console"
# Bounds: every browser wait, every poll, the whole run.
PAGE_TIMEOUT_MS = 15_000
# How long Chromium may take to start, in milliseconds: its first start on a fresh machine
# (font cache, profile) took over 15 s under a loaded CI run.
LAUNCH_TIMEOUT_MS = 90_000
SETTLE_TIMEOUT_S = 10.0
SCREENSHOTS = REPO / "docs" / "screenshots"
XSS = "<script>alert(1)</script><img src=x onerror=alert(1)>"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# Every session token a browser of this module held; the log check looks for each one.
SESSION_TOKENS: list[str] = []


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_RAW = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def wait_for(check: Callable[[], bool], timeout_s: float = SETTLE_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def refund(amount: int = 1000) -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": amount}


def raw_request(url: str, *, cookie: str | None = None, data: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """One request without following redirects: (status, headers, body)."""
    all_headers = dict(headers or {})
    if cookie is not None:
        all_headers["Cookie"] = cookie
    body = None if data is None else urllib.parse.urlencode(data).encode()
    request = urllib.request.Request(url, data=body, headers=all_headers,
                                     method="POST" if body is not None else "GET")
    try:
        with _RAW.open(request, timeout=10) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()


class World:
    """The console's environment: three operators, an agent, a secret and the actions."""

    def __init__(self, steward: Steward) -> None:
        self.steward = steward
        self.keys = {name: create_key(steward.data_dir, ENV, f"console-{name}", role=role)
                     for name, role in [("alice", "operator"), ("bob", "operator"),
                                        ("carol", "operator"), ("agent", None)]}
        self.clients = {name: steward.client(key) for name, key in self.keys.items()}
        self.key_ids = {name: c.auth.identity().data["apiKeyId"] for name, c in self.clients.items()}
        alice = self.clients["alice"]
        alice.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                          allowed_hosts=[steward.fixture_host])
        self.refund_action("console-refund")
        self.refund_action("console-gated", requires_approval=True,
                           description=f"Gated refund {XSS}")
        self.refund_action("console-two-person")
        alice.approval_policies.create(
            name="console two approvers", match_kind="action",
            match_action_name="console-two-person", effect="require_approval", required_approvals=2)

    def refund_action(self, name: str, **extra: Any) -> None:
        adapter = {"type": "stripe.refund",
                   "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                              "baseUrl": self.steward.fixture_url},
                   "credentialSecret": STRIPE_SECRET_NAME}
        self.clients["alice"].actions.create(name=name, adapter=adapter, **extra)

    def invoke(self, who: str, action: str) -> dict[str, Any]:
        return self.clients[who].actions.invoke(action, refund()).data

    def approval(self, approval_id: str) -> dict[str, Any]:
        return self.clients["alice"].approvals.get(approval_id).data

    def invocation(self, invocation_id: str) -> dict[str, Any]:
        return self.clients["alice"].actions.invocation(invocation_id).data

    def effect(self, effect_id: str) -> dict[str, Any]:
        return self.clients["alice"].actions.effect(effect_id).data

    def halted(self) -> bool:
        return bool(self.clients["alice"].environment.get().data["halted"])


@pytest.fixture(scope="module")
def console_steward() -> Iterator[Steward]:
    with running_steward(["--reconcile-interval-ms", "0"]) as steward:
        yield steward


@pytest.fixture(scope="module")
def world(console_steward: Steward) -> World:
    return World(console_steward)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    assert Path(CHROMIUM).is_file(), (
        f"{CHROMIUM} is missing: apt-get install -y chromium (the console's browser tests "
        "need Debian's Chromium; they are never skipped)")
    with sync_playwright() as p:
        yield p


class Browser:
    """One Chromium with its own fresh profile (`--user-data-dir`), closed in `close`, and a
    check that no process of it is left behind."""

    def __init__(self, playwright: Playwright, base: str) -> None:
        self.base = base
        self.profile = tempfile.mkdtemp(prefix="steward-console-chromium-")
        self.dialogs: list[str] = []
        self.context: BrowserContext = playwright.chromium.launch_persistent_context(
            self.profile, executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS,
            timeout=LAUNCH_TIMEOUT_MS, viewport={"width": 1280, "height": 900})
        self.context.set_default_timeout(PAGE_TIMEOUT_MS)
        self.context.on("page", self._watch)
        self.page = self.context.pages[0] if self.context.pages else self.context.new_page()
        self._watch(self.page)

    def _watch(self, page: Page) -> None:
        page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))

    def goto(self, path: str, page: Page | None = None) -> int:
        response = (page or self.page).goto(self.base + path)
        assert response is not None
        return response.status

    def sign_in(self, key: str) -> None:
        self.goto("/console/login")
        self.page.fill("input[name=key]", key)
        with self.page.expect_navigation():
            self.page.click("button[type=submit]")
        assert self.page.url == self.base + "/console/", self.page.url
        SESSION_TOKENS.append(self.session_cookie()["value"])

    def session_cookie(self) -> dict[str, Any]:
        cookies = [c for c in self.context.cookies(self.base) if c["name"].startswith("__Host-")]
        assert len(cookies) == 1, cookies
        return cookies[0]

    def csrf(self) -> str:
        return self.page.get_attribute("input[name=csrf]", "value") or ""

    def submit(self, form_selector: str, fields: dict[str, str] | None = None) -> int:
        """Fills and submits a form of the current page; returns the final answer's status."""
        form = self.page.locator(form_selector).first
        for name, value in (fields or {}).items():
            field = form.locator(f"[name={name}]")
            if field.evaluate("e => e.type") == "checkbox":
                field.check()
            elif field.evaluate("e => e.tagName") == "SELECT":
                field.select_option(value)
            else:
                field.fill(value)
        with self.page.expect_navigation() as navigation:
            form.locator("button[type=submit]").click()
        response = navigation.value
        assert response is not None
        return response.status

    def close(self) -> None:
        try:
            self.context.close()
        finally:
            left = subprocess.run(["pgrep", "-f", f"user-data-dir={self.profile}"],
                                  capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
            shutil.rmtree(self.profile, ignore_errors=True)
            assert left.stdout.strip() == "", f"Chromium processes left behind: {left.stdout}"
        assert self.dialogs == [], f"a page opened a dialog (script ran): {self.dialogs}"


@pytest.fixture
def browser(playwright: Playwright, console_steward: Steward) -> Iterator[Browser]:
    b = Browser(playwright, console_steward.url.replace("127.0.0.1", "localhost"))
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def browser_b(playwright: Playwright, console_steward: Steward) -> Iterator[Browser]:
    b = Browser(playwright, console_steward.url.replace("127.0.0.1", "localhost"))
    try:
        yield b
    finally:
        b.close()


PAGES = ["/console/", "/console/unknown", "/console/invocations", "/console/actions",
         "/console/policies", "/console/limits", "/console/keys", "/console/environment",
         "/console/audit", "/console/effects", "/console/runs", "/console/holds"]


# -- sign-in and sessions ----------------------------------------------------------------------


def test_pages_need_a_session_and_the_cookie_is_host_secure_http_only_strict(
        browser: Browser, world: World, console_steward: Steward) -> None:
    for path in PAGES:
        browser.goto(path)
        assert browser.page.url == browser.base + "/console/login", path
    browser.page.fill("input[name=key]", "stw_" + "0" * 64)
    with browser.page.expect_navigation() as nav:
        browser.page.click("button[type=submit]")
    assert nav.value is not None and nav.value.status == 401
    assert "not valid" in browser.page.inner_text("main")
    assert [c for c in browser.context.cookies() if c["name"].startswith("__Host-")] == []

    # Plain http on localhost: Chromium treats http://localhost as potentially trustworthy and
    # keeps a Secure, __Host- cookie for it.
    browser.sign_in(world.keys["alice"])
    cookie = browser.session_cookie()
    assert cookie["name"] == "__Host-steward_console"
    assert cookie["secure"] is True and cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    assert cookie["domain"] == "localhost"
    assert world.keys["alice"] not in browser.page.content(), "the key is never rendered"
    for path in PAGES:
        assert browser.goto(path) == 200, path

    # Sign-out ends the session on the server: the old cookie, replayed, signs nobody in.
    replay = f"{cookie['name']}={cookie['value']}"
    status, _, _ = raw_request(console_steward.url + "/console/", cookie=replay)
    assert status == 200, "the replay works while the session lives"
    browser.goto("/console/")
    browser.submit("form[action='/console/logout']")
    assert browser.page.url == browser.base + "/console/login"
    status, headers, _ = raw_request(console_steward.url + "/console/", cookie=replay)
    assert status == 303 and headers["location"] == "/console/login"


def test_revoking_the_key_ends_its_session(browser: Browser, world: World,
                                           console_steward: Steward) -> None:
    key = create_key(console_steward.data_dir, ENV, "console-short-lived", role="operator")
    key_id = console_steward.client(key).auth.identity().data["apiKeyId"]
    browser.sign_in(key)
    assert browser.goto("/console/unknown") == 200
    done = subprocess.run([str(steward_bin()), "keys", "revoke", "--data", str(console_steward.data_dir),
                           key_id], capture_output=True, env=child_env(), timeout=CLI_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    browser.goto("/console/unknown")
    assert browser.page.url == browser.base + "/console/login"


# -- approvals -----------------------------------------------------------------------------------


def test_an_approval_from_the_inbox_writes_exactly_once_and_a_second_decision_says_why(
        browser: Browser, browser_b: Browser, world: World, console_steward: Steward) -> None:
    parked = world.invoke("agent", "console-gated")
    assert parked["status"] == "pending_approval"
    approval_id = parked["approvalId"]
    before = console_steward.fixture_writes()

    browser.sign_in(world.keys["alice"])
    row = browser.page.locator(f"tr[data-approval='{approval_id}']")
    text = row.inner_text()
    assert "console-gated" in text and world.key_ids["agent"] in text
    assert parked["input"]["paymentIntent"] in text
    assert "0 of 1" in text
    # The action's description carries markup: it is text on the page, never an element.
    assert XSS in row.locator(".description").inner_text()
    assert browser.page.locator("img[src=x]").count() == 0

    # A second operator has the same inbox open; the first approves.
    browser_b.sign_in(world.keys["bob"])
    assert browser_b.page.locator(f"tr[data-approval='{approval_id}']").count() == 1
    # Bob is typing a note: a live page keeps a form being filled in while the approval changes.
    browser_b.page.fill(f"form[action='/console/approvals/{approval_id}/approve'] input[name=note]",
                        "looks fine")
    status = browser.submit(f"form[action='/console/approvals/{approval_id}/approve']",
                            {"note": "checked the order"})
    assert status == 200 and "approval was recorded" in browser.page.inner_text("main")
    assert wait_for(lambda: world.invocation(parked["id"])["status"] == "succeeded")
    assert console_steward.fixture_writes() == before + 1

    # The stale form of the second operator: the approval is already decided, and says so.
    status = browser_b.submit(f"form[action='/console/approvals/{approval_id}/approve']")
    assert status == 409
    assert "already approved" in browser_b.page.inner_text("main")
    time.sleep(0.3)
    assert console_steward.fixture_writes() == before + 1, "exactly once"


def test_an_expired_approval_says_so(browser: Browser, world: World,
                                     console_steward: Steward) -> None:
    # Raw HTTP: the SDK has no parameter for the approval expiry.
    request = urllib.request.Request(
        console_steward.url + "/api/v2/actions", method="POST",
        data=json.dumps({"name": "console-expiring", "requiresApproval": True,
                         "approvalExpiresInSeconds": 2, "adapter": {
                             "type": "stripe.refund", "credentialSecret": STRIPE_SECRET_NAME,
                             "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                                        "baseUrl": console_steward.fixture_url}}}).encode(),
        headers={"Authorization": f"Bearer {world.keys['alice']}",
                 "Content-Type": "application/json"})
    with _DIRECT.open(request, timeout=10) as response:
        assert response.status == 201
    # Signed in first, so that the inbox shows the approval well within its two seconds.
    browser.sign_in(world.keys["bob"])
    parked = world.invoke("agent", "console-expiring")
    before = console_steward.fixture_writes()
    browser.goto("/console/")
    row = browser.page.locator(f"tr[data-approval='{parked['approvalId']}']")
    assert row.count() == 1 and "never" not in row.inner_text()
    # A note being typed: a live page keeps a form being filled in while the approval expires.
    browser.page.fill(f"form[action='/console/approvals/{parked['approvalId']}/approve'] input[name=note]",
                      "refund confirmed by phone")
    assert wait_for(lambda: world.approval(parked["approvalId"])["status"] == "expired")
    status = browser.submit(f"form[action='/console/approvals/{parked['approvalId']}/approve']")
    alert = browser.page.inner_text("[role=alert]")
    assert status == 409 and "approval_expired" in alert and "not counted" in alert, alert
    assert world.approval(parked["approvalId"])["status"] == "expired"
    assert console_steward.fixture_writes() == before


def test_the_requester_cannot_approve_its_own_request(browser: Browser, world: World,
                                                      console_steward: Steward) -> None:
    parked = world.invoke("alice", "console-gated")
    before = console_steward.fixture_writes()
    browser.sign_in(world.keys["alice"])
    status = browser.submit(f"form[action='/console/approvals/{parked['approvalId']}/approve']")
    assert status == 403
    assert "self_decision_forbidden" in browser.page.inner_text("main")
    assert world.approval(parked["approvalId"])["status"] == "pending"
    assert console_steward.fixture_writes() == before


def test_two_approvers_dispatch_at_the_second_distinct_approval(
        browser: Browser, browser_b: Browser, world: World, console_steward: Steward) -> None:
    parked = world.invoke("agent", "console-two-person")
    assert parked["status"] == "pending_approval"
    approval_id = parked["approvalId"]
    form = f"form[action='/console/approvals/{approval_id}/approve']"
    before = console_steward.fixture_writes()
    browser.sign_in(world.keys["alice"])
    assert "0 of 2" in browser.page.locator(f"tr[data-approval='{approval_id}']").inner_text()
    assert browser.submit(form) == 200
    assert "1 of 2" in browser.page.locator(f"tr[data-approval='{approval_id}']").inner_text()
    time.sleep(0.3)
    assert console_steward.fixture_writes() == before, "one approval of two sends nothing"
    assert world.approval(approval_id)["status"] == "pending"
    # The same operator again counts once.
    assert browser.submit(form) == 409
    assert "each key counts once" in browser.page.inner_text("main")

    browser_b.sign_in(world.keys["bob"])
    assert browser_b.submit(form) == 200
    assert wait_for(lambda: world.invocation(parked["id"])["status"] == "succeeded")
    assert console_steward.fixture_writes() == before + 1
    # The timeline names the policy that asked for two, and both decisions.
    browser_b.goto(f"/console/invocations/{parked['id']}")
    policy_rows = browser_b.page.locator("#timeline tr[data-kind=policy]").all_inner_texts()
    assert len(policy_rows) == 1 and "console two approvers" in policy_rows[0], policy_rows
    approvals_rows = " ".join(browser_b.page.locator("#timeline tr[data-kind=approval]").all_inner_texts())
    assert world.key_ids["alice"] in approvals_rows and world.key_ids["bob"] in approvals_rows


def test_a_batch_of_approvals_is_decided_one_by_one_with_one_note(
        browser: Browser, world: World, console_steward: Steward) -> None:
    # Two calls the agent asked for, and one Alice asked for herself: she may not decide it.
    theirs = [world.invoke("agent", "console-gated") for _ in range(2)]
    mine = world.invoke("alice", "console-gated")
    before = console_steward.fixture_writes()
    browser.sign_in(world.keys["alice"])
    for inv in [*theirs, mine]:
        browser.page.check(f"#inbox input.select[value='{inv['approvalId']}']")
    browser.page.fill("form#batch input[name=note]", "batch checked")
    with browser.page.expect_navigation() as navigation:
        browser.page.click("form#batch button[value=approve]")
    assert navigation.value is not None and navigation.value.status == 200
    outcomes = {li.get_attribute("data-approval"): li.inner_text()
                for li in browser.page.locator("#batch-outcomes li").all()}
    assert len(outcomes) == 3, outcomes
    for inv in theirs:
        said = outcomes[inv["approvalId"]]
        assert "approved" in said and f"invocation {inv['id']} is succeeded" in said, said
        assert world.approval(inv["approvalId"])["decisions"][0]["note"] == "batch checked"
    # Separation of duties is checked for each approval: hers is refused, the others ran.
    assert "self_decision_forbidden" in outcomes[mine["approvalId"]], outcomes
    assert world.approval(mine["approvalId"])["status"] == "pending"
    assert console_steward.fixture_writes() == before + 2, "each approved call ran once"
    # Nothing selected is refused, naming the field.
    browser.goto("/console/")
    with browser.page.expect_navigation() as navigation:
        browser.page.click("form#batch button[value=deny]")
    assert navigation.value is not None and navigation.value.status == 400
    assert "ids" in browser.page.inner_text("main")
    assert console_steward.fixture_writes() == before + 2


def test_a_denial_with_a_note_is_what_the_agent_reads_and_the_note_is_text(
        browser: Browser, world: World, console_steward: Steward) -> None:
    parked = world.invoke("agent", "console-gated")
    before = console_steward.fixture_writes()
    note = f"not this customer {XSS}"
    browser.sign_in(world.keys["alice"])
    status = browser.submit(f"form[action='/console/approvals/{parked['approvalId']}/deny']",
                            {"note": note})
    assert status == 200
    seen = world.clients["agent"].approvals.get(parked["approvalId"]).data
    assert seen["status"] == "denied"
    assert [d["note"] for d in seen["decisions"]] == [note]
    assert world.clients["agent"].actions.invocation(parked["id"]).data["status"] == "denied"
    assert console_steward.fixture_writes() == before
    # The note is shown, as text, among the recent decisions.
    assert note in browser.page.locator("#decided").inner_text()
    assert browser.page.locator("img[src=x]").count() == 0
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.page.screenshot(path=str(SCREENSHOTS / "console-inbox.png"), full_page=True)
    browser.goto("/console/actions")
    assert XSS in browser.page.inner_text("#actions")
    browser.goto(f"/console/invocations/{parked['id']}")
    assert note in browser.page.inner_text("#timeline")


# -- unknown outcomes ----------------------------------------------------------------------------


def unknown_invocation(world: World, steward: Steward) -> dict[str, Any]:
    steward.set_fault("drop_after_commit")
    try:
        inv = world.invoke("agent", "console-refund")
    finally:
        steward.clear_faults()
    assert inv["status"] == "unknown", inv
    return inv


def test_reconcile_now_settles_an_unknown_without_writing_and_resolve_is_attributed(
        browser: Browser, world: World, console_steward: Steward) -> None:
    first = unknown_invocation(world, console_steward)
    second = unknown_invocation(world, console_steward)
    writes = console_steward.fixture_writes()

    browser.sign_in(world.keys["alice"])
    browser.goto("/console/unknown")
    queue = browser.page.inner_text("#unknown")
    assert first["effectId"] in queue and second["effectId"] in queue
    assert browser.page.locator("text=/replay|re-send|retry/i").count() == 0, "no re-send control"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.page.screenshot(path=str(SCREENSHOTS / "console-unknown-queue.png"), full_page=True)

    status = browser.submit(f"form[action='/console/effects/{first['effectId']}/reconcile']")
    assert status == 200 and "Reconciled" in browser.page.inner_text("main")
    assert world.invocation(first["id"])["status"] == "succeeded"
    assert console_steward.fixture_writes() == writes, "reconcile is read-only"

    status = browser.submit(f"form[action='/console/effects/{second['effectId']}/resolve']",
                            {"outcome": "succeeded", "reason": "found re_123 in the provider dashboard",
                             "externalReference": "re_123"})
    assert status == 200 and "Resolved" in browser.page.inner_text("main")
    effect = world.effect(second["effectId"])
    manual = [e for e in effect["evidence"] if e["kind"] == "manual_resolution"]
    assert len(manual) == 1 and manual[0]["actorKeyId"] == world.key_ids["alice"]
    assert world.invocation(second["id"])["status"] == "succeeded"
    assert console_steward.fixture_writes() == writes

    # The timeline: intent, attempt, evidence and audit in one order, as the API has them.
    browser.goto(f"/console/invocations/{first['id']}")
    kinds = browser.page.locator("#timeline tr[data-kind]").evaluate_all(
        "rows => rows.map(r => r.dataset.kind)")
    assert kinds[0] == "intent"
    assert {"attempt", "evidence", "audit"} <= set(kinds)
    times = browser.page.locator("#timeline tr[data-kind] td:first-child").all_inner_texts()
    assert times == sorted(times)
    api = world.effect(first["effectId"])
    timeline = browser.page.inner_text("#timeline")
    for evidence in api["evidence"]:
        assert evidence["message"] in timeline
    assert len([k for k in kinds if k == "evidence"]) == len(api["evidence"])
    browser.page.screenshot(path=str(SCREENSHOTS / "console-timeline.png"), full_page=True)


def test_a_resolution_by_the_invoking_key_is_refused(browser: Browser, world: World,
                                                     console_steward: Steward) -> None:
    console_steward.set_fault("drop_after_commit")
    try:
        inv = world.invoke("alice", "console-refund")
    finally:
        console_steward.clear_faults()
    browser.sign_in(world.keys["alice"])
    browser.goto("/console/unknown")
    status = browser.submit(f"form[action='/console/effects/{inv['effectId']}/resolve']",
                            {"outcome": "failed", "reason": "mine"})
    assert status == 403 and "self_resolution_forbidden" in browser.page.inner_text("main")
    assert world.invocation(inv["id"])["status"] == "unknown"


# -- writes from another origin --------------------------------------------------------------------


class AttackerSite:
    """A page on another localhost port that auto-submits a form to the console."""

    def __init__(self) -> None:
        self.pages: dict[str, bytes] = {}
        pages = self.pages

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages.get(self.path, b"")
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def form(self, name: str, action: str, fields: dict[str, str]) -> str:
        inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
        self.pages[f"/{name}.html"] = (
            f'<form id="f" method="post" action="{action}">{inputs}</form>'
            '<script>document.getElementById("f").submit()</script>').encode()
        return f"{self.base}/{name}.html"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def test_forms_posted_from_another_localhost_port_are_refused_and_change_nothing(
        browser: Browser, world: World, console_steward: Steward) -> None:
    parked = world.invoke("agent", "console-gated")
    unknown = unknown_invocation(world, console_steward)
    writes = console_steward.fixture_writes()
    # The console on 127.0.0.1 this time, the attacker on another port of 127.0.0.1: the same
    # site, so SameSite=Strict lets the cookie through; the origin check must not.
    browser.base = console_steward.url
    browser.sign_in(world.keys["bob"])
    csrf = browser.csrf()  # even with the real token, another origin is refused
    attacker = AttackerSite()
    try:
        targets = [
            ("approve", f"/console/approvals/{parked['approvalId']}/approve", {"note": "x"}),
            ("resolve", f"/console/effects/{unknown['effectId']}/resolve",
             {"outcome": "failed", "reason": "x"}),
            ("halt", "/console/environment/halt", {"reason": "x", "confirm": "yes"}),
        ]
        for name, path, fields in targets:
            url = attacker.form(name, console_steward.url + path, {**fields, "csrf": csrf})
            target = console_steward.url + path
            with browser.page.expect_response(
                    lambda r, target=target: r.request.method == "POST" and r.url == target) as posted:
                browser.page.goto(url)
            assert posted.value.status == 403, (name, posted.value.status)
            browser.page.wait_for_url(target)
            assert "another site or another port" in browser.page.inner_text("main"), name
    finally:
        attacker.close()
    assert world.approval(parked["approvalId"])["status"] == "pending"
    assert world.invocation(unknown["id"])["status"] == "unknown"
    assert world.halted() is False
    assert console_steward.fixture_writes() == writes

    # Without the CSRF token, from the console's own origin: refused too.
    cookie = browser.session_cookie()
    status, _, body = raw_request(
        console_steward.url + f"/console/approvals/{parked['approvalId']}/approve",
        cookie=f"{cookie['name']}={cookie['value']}", data={"note": "x"},
        headers={"Origin": console_steward.url})
    assert status == 403 and "CSRF" in body
    assert world.approval(parked["approvalId"])["status"] == "pending"

    # The same forms from the console itself work.
    browser.goto("/console/")
    assert browser.submit(f"form[action='/console/approvals/{parked['approvalId']}/approve']") == 200
    assert wait_for(lambda: world.invocation(parked["id"])["status"] == "succeeded")
    browser.goto("/console/unknown")
    assert browser.submit(f"form[action='/console/effects/{unknown['effectId']}/resolve']",
                          {"outcome": "succeeded", "reason": "seen at the provider"}) == 200
    assert world.invocation(unknown["id"])["status"] == "succeeded"


# -- the kill switch and the audit view -------------------------------------------------------------


def test_the_kill_switch_stops_the_next_invoke_and_shows_in_the_audit_view(
        browser: Browser, world: World, console_steward: Steward) -> None:
    browser.sign_in(world.keys["carol"])
    browser.goto("/console/environment")
    status = browser.submit("form[action='/console/environment/halt']", {"reason": "incident 12"})
    assert status == 400 and "confirm" in browser.page.inner_text("main")
    assert world.halted() is False, "no confirmation, no halt"
    assert browser.submit("form[action='/console/environment/halt']",
                          {"reason": "incident 12", "confirm": "yes"}) == 200
    assert world.halted() is True
    writes = console_steward.fixture_writes()
    try:
        with pytest.raises(anlyon.AnlyonError) as refused:
            world.invoke("agent", "console-refund")
        assert refused.value.status == 409 and refused.value.code == "environment_halted"
        # An MCP call (Streamable HTTP, stateless) is refused the same way, and sends nothing.
        status, answer = mcp_call(console_steward, world.keys["agent"], "console-refund",
                                  {**refund(), "operationKey": "console-halted-mcp"})
        assert status == 200 and answer["result"]["isError"] is True, answer
        assert "environment_halted" in json.dumps(answer["result"]), answer
        assert "halted" in browser.page.inner_text("[role=alert]")
        browser.goto("/console/audit")
        assert "Audit chain intact" in browser.page.inner_text("#chain")
        audit = browser.page.inner_text("#audit")
        assert "environment.halted" in audit and "incident 12" in audit
        assert world.key_ids["carol"] in audit
        assert STRIPE_SECRET_VALUE not in browser.page.content()
    finally:
        browser.goto("/console/environment")
        assert browser.submit("form[action='/console/environment/resume']", {"confirm": "yes"}) == 200
    assert world.halted() is False
    assert console_steward.fixture_writes() == writes
    assert world.invoke("agent", "console-refund")["status"] == "succeeded"


def mcp_call(steward: Steward, key: str, tool: str, arguments: dict[str, Any]) -> tuple[int, Any]:
    """One raw `tools/call` on `/mcp` (the endpoint is stateless: no session to open first)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}).encode()
    request = urllib.request.Request(steward.url + "/mcp", data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {key}", "MCP-Protocol-Version": "2025-06-18"})
    try:
        with _DIRECT.open(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


# -- the overview, live updates, filters, search and paging --------------------------------------


def api_get(steward: Steward, key: str, path: str) -> dict[str, Any]:
    """One GET of the API with `key`, the whole envelope."""
    request = urllib.request.Request(steward.url + "/api/v2" + path,
                                     headers={"Authorization": f"Bearer {key}"})
    with _DIRECT.open(request, timeout=10) as response:
        return json.loads(response.read())


def api_total(steward: Steward, key: str, path: str) -> int:
    return int(api_get(steward, key, path)["pagination"]["total"])


def test_get_root_leads_to_the_console(console_steward: Steward) -> None:
    status, headers, _ = raw_request(console_steward.url + "/")
    assert status == 303 and headers["location"] == "/console/"


def overview_counts(browser: Browser) -> dict[str, int]:
    return {name: int(browser.page.get_attribute(f"#count-{name} .count", "data-count") or "-1")
            for name in ("pending", "unknown", "reconciling", "failed")}


def api_counts(steward: Steward, key: str) -> dict[str, int]:
    return {"pending": api_total(steward, key, "/approvals?status=pending&limit=1"),
            "unknown": api_total(steward, key, "/actions/effects?outcome=unknown&limit=1"),
            "reconciling": api_total(steward, key, "/actions/effects?stage=reconciling&limit=1"),
            "failed": api_total(steward, key, "/actions/effects?outcome=failed&limit=1")}


def test_overview_counts_match_the_api(browser: Browser, world: World,
                                       console_steward: Steward) -> None:
    # At least one of each that the module can make: a pending approval and an unknown effect.
    world.invoke("agent", "console-gated")
    unknown_invocation(world, console_steward)
    browser.sign_in(world.keys["alice"])
    key = world.keys["alice"]
    api = api_counts(console_steward, key)
    assert api["pending"] >= 1 and api["unknown"] >= 1, api
    assert overview_counts(browser) == api
    assert browser.page.inner_text("#environment-state") .startswith("Running")
    assert world.halted() is False
    # The inbox on the same page lists every pending approval the count counts (under 200).
    assert browser.page.locator("#inbox tr.approval").count() == api["pending"]


def test_a_new_pending_approval_appears_without_a_reload(browser: Browser, world: World,
                                                         console_steward: Steward) -> None:
    # Its own key: the key's stream slots are not shared with the browsers of other tests.
    key = create_key(console_steward.data_dir, ENV, "console-live", role="operator")
    browser.sign_in(key)
    browser.page.wait_for_selector("#live:text-is('live')")
    browser.page.evaluate("window.__sameDocument = true")
    before = overview_counts(browser)["pending"]
    parked = world.invoke("agent", "console-gated")
    assert parked["status"] == "pending_approval", parked
    browser.page.wait_for_selector(f"tr[data-approval='{parked['approvalId']}']",
                                   timeout=PAGE_TIMEOUT_MS)
    assert browser.page.evaluate("window.__sameDocument") is True, "the page was not reloaded"
    assert overview_counts(browser)["pending"] == before + 1
    # A note being typed is not wiped by an update: the page waits until the field is left as it was.
    row = browser.page.locator(f"tr[data-approval='{parked['approvalId']}']")
    row.locator("input[name=note]").first.fill("checking with finance")
    second = world.invoke("agent", "console-gated")
    browser.page.wait_for_selector("#live:text-is('updates waiting')")
    assert row.locator("input[name=note]").first.input_value() == "checking with finance"
    assert browser.page.locator(f"tr[data-approval='{second['approvalId']}']").count() == 0
    row.locator("input[name=note]").first.fill("")
    browser.page.wait_for_selector(f"tr[data-approval='{second['approvalId']}']",
                                   timeout=PAGE_TIMEOUT_MS)
    assert browser.page.evaluate("window.__sameDocument") is True


def test_a_search_by_operation_key_finds_its_invocation(browser: Browser, world: World,
                                                        console_steward: Steward) -> None:
    operation_key = "order-" + pysecrets.token_hex(4) + "-refund"
    found = world.clients["agent"].actions.invoke("console-refund", refund(),
                                                  operation_key=operation_key).data
    for _ in range(3):  # other invocations around it
        world.invoke("agent", "console-refund")
    browser.sign_in(world.keys["alice"])
    browser.goto("/console/invocations")
    with browser.page.expect_navigation():
        browser.page.fill("form.filters input[name=operationKey]", operation_key)
        browser.page.click("form.filters button[type=submit]")
    rows = browser.page.locator("#invocations tr.invocation")
    assert rows.count() == 1
    assert rows.first.get_attribute("data-invocation") == found["id"]
    assert operation_key in rows.first.inner_text()
    # The effects list and the audit view find the same operation by its key.
    browser.goto("/console/effects?" + urllib.parse.urlencode({"operationKey": operation_key}))
    effects = browser.page.locator("#effects tr.effect")
    assert effects.count() == 1 and effects.first.get_attribute("data-effect") == found["effectId"]
    browser.goto("/console/audit?" + urllib.parse.urlencode({"operationKey": operation_key}))
    subjects = set(browser.page.locator("#audit tr.event td:nth-child(4)").all_inner_texts())
    assert subjects and subjects <= {found["id"], found["effectId"]}, subjects
    # A key nothing was recorded under finds nothing; a malformed one is refused by name.
    browser.goto("/console/invocations?operationKey=no-such-key-" + pysecrets.token_hex(4))
    assert browser.page.locator("#invocations tr.invocation").count() == 0
    assert browser.goto("/console/invocations?operationKey=%07") == 400
    assert "operationKey" in browser.page.inner_text("main")


def test_an_agent_key_cannot_reach_approve(browser: Browser, world: World,
                                           console_steward: Steward) -> None:
    parked = world.invoke("agent", "console-gated")
    browser.goto("/console/login")
    browser.page.fill("input[name=key]", world.keys["agent"])
    with browser.page.expect_navigation() as nav:
        browser.page.click("button[type=submit]")
    assert nav.value is not None and nav.value.status == 403
    assert "approvals:decide" in browser.page.inner_text("main")
    assert [c for c in browser.context.cookies() if c["name"].startswith("__Host-")] == []
    for path in ["/console/", f"/console/invocations/{parked['id']}"]:
        browser.goto(path)
        assert browser.page.url == browser.base + "/console/login", path
        assert browser.page.locator("button", has_text="Approve").count() == 0
    # The form's target refuses without an operator session, and nothing is decided.
    status, _, _ = raw_request(console_steward.url + f"/console/approvals/{parked['approvalId']}/approve",
                               data={"note": "x"}, headers={"Origin": console_steward.url})
    assert status == 403
    assert world.approval(parked["approvalId"])["status"] == "pending"


def test_after_an_approve_the_console_says_what_the_dispatch_did(
        browser: Browser, world: World, console_steward: Steward) -> None:
    parked = world.invoke("agent", "console-gated")
    browser.sign_in(world.keys["bob"])
    writes = console_steward.fixture_writes()
    status = browser.submit(f"tr[data-approval='{parked['approvalId']}'] form[action$='/approve']")
    assert status == 200
    dispatch = browser.page.inner_text("#dispatch")
    assert parked["id"] in dispatch and "succeeded" in dispatch and "HTTP 200" in dispatch, dispatch
    assert world.invocation(parked["id"])["status"] == "succeeded"
    assert console_steward.fixture_writes() == writes + 1


def test_times_are_relative_with_the_exact_utc_on_hover(browser: Browser, world: World) -> None:
    made = world.invoke("agent", "console-refund")
    browser.sign_in(world.keys["alice"])
    browser.goto("/console/invocations?action=console-refund")
    cell = browser.page.locator(f"tr[data-invocation='{made['id']}'] time")
    assert cell.get_attribute("datetime") == made["createdAt"]
    assert cell.get_attribute("title") == made["createdAt"] + " (UTC)"
    assert cell.inner_text().endswith(" ago")


def test_invocation_filters_time_range_and_paging_match_the_api(
        browser: Browser, world: World, console_steward: Steward) -> None:
    world.refund_action("console-paged")
    made = [world.invoke("agent", "console-paged")["id"] for _ in range(57)]
    key = world.keys["alice"]
    api = api_get(console_steward, key, "/actions/invocations?action=console-paged&limit=200")["data"]
    assert {i["id"] for i in api} == set(made)
    browser.sign_in(key)

    def ids_on_page() -> list[str]:
        return browser.page.locator("#invocations tr.invocation").evaluate_all(
            "rows => rows.map(r => r.dataset.invocation)")

    # Paging: 50, then the other 7, newest first as the API lists them, each once.
    browser.goto("/console/invocations?action=console-paged")
    first = ids_on_page()
    assert len(first) == 50 and browser.page.inner_text("#page-range") == "1–50 of 57"
    browser.page.click("#next-page")
    browser.page.wait_for_url("**offset=50**")
    second = ids_on_page()
    assert browser.page.inner_text("#page-range") == "51–57 of 57"
    assert first + second == [i["id"] for i in api]
    assert browser.page.locator("#next-page").count() == 0

    # Status: none of them failed; all succeeded.
    browser.goto("/console/invocations?action=console-paged&status=failed")
    assert ids_on_page() == []
    browser.goto("/console/invocations?action=console-paged&status=succeeded")
    assert len(ids_on_page()) == 50

    # A time range: exactly the invocations the API lists inside it.
    times = sorted({i["createdAt"] for i in api})
    start, end = times[len(times) // 4], times[(3 * len(times)) // 4]
    expected = [i["id"] for i in api if start <= i["createdAt"] <= end]
    browser.goto("/console/invocations?" + urllib.parse.urlencode(
        {"action": "console-paged", "from": start, "to": end}))
    assert ids_on_page() == expected
    assert browser.page.inner_text("#page-range") == f"1–{len(expected)} of {len(expected)}"

    # A bad filter is refused by name, as the API refuses one.
    assert browser.goto("/console/invocations?status=bogus") == 400
    assert "status" in browser.page.inner_text("main")
    assert browser.goto("/console/invocations?from=yesterday") == 400
    assert "from" in browser.page.inner_text("main")


def test_effects_filter_by_outcome_and_the_audit_pages_with_its_json_folded(
        browser: Browser, world: World, console_steward: Steward) -> None:
    unknown_invocation(world, console_steward)
    key = world.keys["alice"]
    browser.sign_in(key)
    browser.goto("/console/effects?status=unknown")
    outcomes = browser.page.locator("#effects tr.effect td:nth-child(4)").all_inner_texts()
    total = api_total(console_steward, key, "/actions/effects?outcome=unknown&limit=1")
    assert outcomes and set(outcomes) == {"unknown"} and len(outcomes) == min(total, 50)

    browser.goto("/console/audit")
    rows = browser.page.locator("#audit tr.event")
    assert 0 < rows.count() <= 50
    assert browser.page.locator("#audit details").count() > 0
    assert browser.page.locator("#audit details[open]").count() == 0, "JSON starts folded"
    height = browser.page.evaluate("document.body.scrollHeight")
    assert height < 6000, f"the audit page is {height} px tall"
    first_seqs = rows.evaluate_all("rows => rows.map(r => r.cells[0].innerText)")
    browser.page.click("#next-page")
    browser.page.wait_for_url("**offset=50**")
    second_seqs = browser.page.locator("#audit tr.event").evaluate_all(
        "rows => rows.map(r => r.cells[0].innerText)")
    assert second_seqs and not set(first_seqs) & set(second_seqs)
    browser.goto("/console/audit?action=approval.")
    kinds = browser.page.locator("#audit tr.event td:nth-child(3)").all_inner_texts()
    assert kinds and all(k.startswith("approval.") for k in kinds)


def test_the_runs_page_shows_the_span_tree(browser: Browser, world: World) -> None:
    agent = world.clients["agent"]
    run = agent.runs.start(name="refund triage").data
    agent.runs.ingest_spans(run["id"], [
        {"id": "root", "name": "triage ticket", "type": "workflow_step"},
        {"id": "llm", "parentSpanId": "root", "name": "classify", "type": "model_call"},
        {"id": "tool", "parentSpanId": "llm", "name": "refund", "type": "tool_call"},
        {"id": "note", "parentSpanId": "root", "name": "reply", "type": "tool_call"},
    ])
    browser.sign_in(world.keys["alice"])
    browser.goto("/console/runs")
    assert browser.page.locator(f"tr[data-run='{run['id']}']").count() == 1
    browser.page.click(f"tr[data-run='{run['id']}'] a")
    spans = browser.page.locator("#spans li.span").evaluate_all(
        "items => items.map(i => [i.dataset.span, Number(i.dataset.depth)])")
    assert spans == [["root", 0], ["llm", 1], ["tool", 2], ["note", 1]]


def test_zy_overview_screenshot_with_realistic_data(playwright: Playwright,
                                                     console_steward: Steward) -> None:
    """The README's console picture: a shop's refunds, not test payloads."""
    steward = console_steward
    maria = create_key(steward.data_dir, "shop", "maria (support lead)", role="operator")
    lee = steward.client(create_key(steward.data_dir, "shop", "lee (finance)", role="operator"))
    agent = steward.client(create_key(steward.data_dir, "shop", "support-agent"))
    ops = steward.client(maria)
    ops.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE, allowed_hosts=[steward.fixture_host])
    adapter = {"type": "stripe.refund", "credentialSecret": STRIPE_SECRET_NAME,
               "config": {"account": "acct_1", "mode": "test", "currency": "usd", "baseUrl": steward.fixture_url}}
    ops.actions.create(name="refund-customer", adapter=adapter,
                       description="Refund a customer's card payment, in full or in part")
    ops.actions.create(name="refund-large-order", adapter=adapter, requires_approval=True,
                       description="Refunds over $500: a second person approves")
    for order, amount in [("1042", 1999), ("1043", 4500), ("1047", 1250)]:
        agent.actions.invoke("refund-customer", {"paymentIntent": f"pi_3Q{order}shop", "amount": amount},
                             operation_key=f"order-{order}-refund")
    approved = agent.actions.invoke("refund-large-order", {"paymentIntent": "pi_3Q1036shop", "amount": 82000},
                                    operation_key="order-1036-refund").data
    lee.approvals.approve(approved["approvalId"], note="matches the returned shipment")
    agent.actions.invoke("refund-large-order", {"paymentIntent": "pi_3Q1051shop", "amount": 64900},
                         operation_key="order-1051-refund")
    steward.set_fault("reject")
    try:
        # The provider refuses it (already refunded): a failed effect, whichever way the SDK says so.
        agent.actions.invoke("refund-customer", {"paymentIntent": "pi_3Q1038shop", "amount": 2400},
                             operation_key="order-1038-refund")
    except anlyon.AnlyonError:
        pass
    finally:
        steward.clear_faults()
    steward.set_fault("drop_after_commit")
    try:
        agent.actions.invoke("refund-customer", {"paymentIntent": "pi_3Q1049shop", "amount": 3200},
                             operation_key="order-1049-refund")
    finally:
        steward.clear_faults()
    b = Browser(playwright, steward.url.replace("127.0.0.1", "localhost"))
    try:
        b.sign_in(maria)
        counts = overview_counts(b)
        assert counts["pending"] == 1 and counts["unknown"] == 1 and counts["failed"] == 1, counts
        assert "lee (finance)" in b.page.inner_text("#decided")
        b.page.screenshot(path=str(SCREENSHOTS / "console-overview.png"), full_page=True)
    finally:
        b.close()


# -- a read-only console -------------------------------------------------------------------------


def test_a_read_only_console_shows_no_write_control_and_refuses_writes(playwright: Playwright) -> None:
    with running_steward(["--reconcile-interval-ms", "0", "--console-read-only"]) as steward:
        keys = {n: create_key(steward.data_dir, ENV, f"ro-{n}", role="operator") for n in ("a", "b")}
        a = steward.client(keys["a"])
        a.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE, allowed_hosts=[steward.fixture_host])
        a.actions.create(name="ro-gated", requires_approval=True, adapter={
            "type": "stripe.refund", "credentialSecret": STRIPE_SECRET_NAME,
            "config": {"account": "acct_1", "mode": "test", "currency": "usd", "baseUrl": steward.fixture_url}})
        parked = a.actions.invoke("ro-gated", refund()).data
        b = Browser(playwright, steward.url)
        try:
            b.sign_in(keys["b"])
            assert b.page.locator(f"tr[data-approval='{parked['approvalId']}']").count() == 1
            for path in ["/console/", "/console/unknown", "/console/environment"]:
                b.goto(path)
                forms = b.page.locator("form").evaluate_all("fs => fs.map(f => f.action)")
                assert forms == [steward.url + "/console/logout"], (path, forms)
            cookie = b.session_cookie()
            status, _, body = raw_request(
                steward.url + f"/console/approvals/{parked['approvalId']}/approve",
                cookie=f"{cookie['name']}={cookie['value']}", data={"csrf": b.csrf()},
                headers={"Origin": steward.url})
            assert status == 403 and "read-only" in body
            assert a.approvals.get(parked["approvalId"]).data["status"] == "pending"
            # Sign-out still works.
            b.submit("form[action='/console/logout']")
            assert b.page.url == steward.url + "/console/login"
        finally:
            b.close()


def test_zz_no_key_secret_or_session_token_in_the_server_log(world: World,
                                                              console_steward: Steward) -> None:
    """Last in the module: everything above signed in, posted and was refused in front of it."""
    log = console_steward.server_log.read_text("utf-8", "replace")
    assert "/console/" in log, "the console's requests are logged (by path)"
    assert SESSION_TOKENS, "the browsers above signed in"
    for name, value in [("the vaulted secret", STRIPE_SECRET_VALUE),
                        *[(f"{who}'s key", key) for who, key in world.keys.items()],
                        *[("a session token", token) for token in SESSION_TOKENS]]:
        assert value not in log, f"{name} is in the server log"

