"""The console in a real headless browser (Debian's Chromium driven by Playwright, which
downloads no browser of its own) against the real suite: chat runs stream with their steps,
a job created and triggered shows its run, a memory shows its provenance and can be
forgotten, a memory saved and edited in the page shows its change record, the audit marks
hidden messages, errors are shown as the API gives them, and the pages fit a narrow window.
Screenshots go to results/console/ for a person to look at."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright

from agentmesh_client import Client
from services.launcher import ROOT, Suite
from tests.e2e.client_helpers import chat, memory_job, private_suite, wait_for_job_run
from tests.e2e.conftest import token

pytestmark = pytest.mark.e2e

SHOTS = ROOT / "results" / "console"
# axe-core from the npm registry (tools/node, pinned): put into the page by the test only.
AXE = ROOT / "tools" / "node" / "node_modules" / "axe-core" / "axe.min.js"
# The scripted model's seconds per token: slow enough that a reply is seen while it streams.
TOKEN_LATENCY = "0.03"


def chromium() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        pytest.fail("Chromium is missing: `make chromium` installs it (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def slow_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    slow = {"AGENTMESH_SCRIPTED_TOKEN_LATENCY": TOKEN_LATENCY}
    with private_suite(tmp_path_factory.mktemp("console"), **slow) as suite:
        yield suite


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=chromium(), headless=True)
        yield b
        await b.close()


class Console:
    """One browser page signed in as `owner`, collecting the page's own errors."""

    def __init__(self, page: Page, suite: Suite, owner: str, *, admin: bool = False) -> None:
        self.page = page
        self.suite = suite
        self.owner = owner
        self.admin = admin
        self.errors: list[str] = []
        self._client: Client | None = None
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("console", self._console)

    def _console(self, msg: Any) -> None:
        # The browser logs every 4xx/5xx it fetched, and @ag-ui/client logs a refused run
        # ("Agent execution failed: ..."): the error tests provoke those on purpose.
        expected = ("Failed to load resource", "Agent execution failed: Error: HTTP 4")
        if msg.type == "error" and not msg.text.startswith(expected):
            self.errors.append(msg.text)

    @property
    def client(self) -> Client:
        """The owner's API client (closed with the page)."""
        if self._client is None:
            self._client = Client(self.suite.gateway_url, token(self.owner, admin=self.admin))
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    async def open(self, route: str = "#/chat") -> None:
        signed = token(self.owner, admin=self.admin)
        await self.page.goto(f"{self.suite.gateway_url}/#token={signed}")
        await self.page.wait_for_selector("#nav:not([hidden])")
        if route != "#/chat":
            await self.page.evaluate("(r) => { location.hash = r }", route)

    async def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        await self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

    async def error_text(self, slot: str) -> str:
        """The text of the error box shown in `slot`, once it shows."""
        box = self.page.locator(f"{slot} .error")
        await box.wait_for()
        return await box.text_content() or ""

    def no_errors(self) -> None:
        assert not self.errors, self.errors


async def messages_drawn(page: Page) -> list[list[str]]:
    """The conversation as drawn: each message's class, id and markup, its times left out."""
    drawn: list[list[str]] = await page.locator("#messages > .msg").evaluate_all(
        "els => els.map(e => { const c = e.cloneNode(true);"
        " c.querySelectorAll('time').forEach(t => t.remove());"
        " return [e.className, e.dataset.messageId, c.innerHTML] })"
    )
    return drawn


# Every id on the page drawn on one line, short, its whole self in its title and data-id.
IDS_ON_ONE_LINE = """() => [...document.querySelectorAll('.id')]
    .filter(e => e.getClientRects().length)
    .map(e => [e.dataset.id ?? e.title, e.textContent, e.getClientRects().length])"""


@pytest.fixture
async def console(browser: Browser, slow_suite: Suite) -> AsyncIterator[Console]:
    context = await browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    page = await context.new_page()
    c = Console(page, slow_suite, f"web-{uuid.uuid4().hex[:8]}")
    yield c
    c.close()
    await context.close()


async def test_a_chat_run_streams_its_text_and_its_steps(console: Console) -> None:
    page, client = console.page, console.client
    await console.open()
    words = " ".join(f"word{i}" for i in range(30))
    await page.fill("#chat-input", f"Please repeat {words}")
    await page.click("#send")
    # Seen while it streams: part of the reply, the cursor still on.
    partial = await page.wait_for_function(
        "() => { const b = document.querySelector('.msg-assistant .bubble.streaming');"
        " return b && b.textContent.length > 0 && b.textContent }"
    )
    partial_text = await partial.json_value()
    assert await page.locator("#stop").is_visible()
    await page.wait_for_selector(".tl-end")
    final = await page.locator(".msg-assistant .bubble").last.text_content()
    assert final and len(partial_text) < len(final) and final.startswith(partial_text)
    # The steps, in order, each finished with its duration; the run's outcome and usage.
    steps = await page.locator("#timeline li").evaluate_all(
        "els => els.map(e => [e.dataset.step, e.classList.contains('done'),"
        " e.querySelector('.when')?.textContent])"
    )
    names = [s[0] for s in steps]
    assert names[:3] == ["run", "step:router", "step:worker"], names
    assert all(
        (done and when.endswith("ms")) or when.endswith(" s") for _, done, when in steps[1:3]
    )
    # The run's record, read once the stream ended.
    await page.locator("#run-head", has_text="stored as").wait_for(timeout=10_000)
    head = await page.locator("#run-head").text_content()
    assert head and "succeeded" in head and "tokens" in head and "chat_default" in head
    # What streamed is what history stored.
    hash_ = await page.evaluate("location.hash")
    thread = hash_.split("/", 2)[2]
    stored = [m.text for m in client.history(thread).messages]
    assert stored[-1] == final
    await console.shot("chat-run")

    # A tool call: its arguments and result, in the timeline and in the conversation.
    await page.fill("#chat-input", 'use the memory_search tool with {"query": "tea"}')
    await page.click("#send")
    tool = page.locator('#timeline li[data-step^="tool:"]')
    await tool.locator(".tool-result", has_text="[]").wait_for()
    assert "memory_search" in (await tool.text_content() or "")
    assert '"query": "tea"' in (await tool.locator(".tool-args").text_content() or "")
    await page.wait_for_selector(".tl-end")
    assert await page.locator("#messages .tool-card", has_text="memory_search").count() == 1
    await console.shot("chat-tool-call")

    # Reloading shows the thread's /history: the same messages, as stored, and drawn the same
    # as they were live (no kind labels, the tool call on its message, its result apart).
    live = await messages_drawn(page)
    await page.click("#reload-history")
    await page.wait_for_function(
        "n => document.querySelectorAll('#messages > .msg').length === n",
        arg=len(client.history(thread).messages),
    )
    stored_drawn = await messages_drawn(page)
    assert stored_drawn == live
    assert not any(k in str(stored_drawn) for k in ("user_message", "agent_reply", "tool_call"))
    console.no_errors()


async def test_a_reply_renders_its_markdown_and_no_html_in_it_runs(console: Console) -> None:
    """The scripted model echoes the message, so the reply carries its Markdown and its HTML:
    the Markdown is rendered; the HTML is shown as text, and nothing of it runs (the page's
    CSP would also refuse it, and log that as an error, which no_errors catches)."""
    page, client = console.page, console.client
    await console.open()
    text = (
        "**bold** and `inline`\n\n```\nprint(1)\n```\n\n- one\n- two\n\n"
        "[a link](javascript:window.pwned=3) and [another](https://example.org/)\n\n"
        '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    )
    await page.fill("#chat-input", text)
    await page.click("#send")
    await page.wait_for_selector(".tl-end")
    reply = page.locator("#messages .msg-assistant .bubble").last
    assert await reply.locator("strong").text_content() == "bold"
    assert await reply.locator("p code").first.text_content() == "inline"
    assert await reply.locator("pre code").text_content() == "print(1)\n"
    assert await reply.locator("li").all_text_contents() == ["one", "two"]
    shown = await reply.text_content() or ""
    assert "<script>window.pwned = 1</script>" in shown, shown
    assert '<img src=x onerror="window.pwned = 2">' in shown, shown
    # No markup of the model's: no script, no image, no handler, no javascript: link (a link
    # to the web opens apart from the console).
    found = await page.evaluate(
        "() => [document.querySelectorAll('#messages script, #messages img').length,"
        " [...document.querySelectorAll('#messages *')].filter(e => [...e.attributes]"
        ".some(a => a.name.startsWith('on'))).length,"
        " [...document.querySelectorAll('#messages .bubble a')].map(a => [a.textContent,"
        " a.getAttribute('href'), a.target, a.rel]), window.pwned ?? null]"
    )
    assert found == [
        0,
        0,
        [["a link", None, "_blank", "noopener noreferrer"],
         ["another", "https://example.org/", "_blank", "noopener noreferrer"]],
        None,
    ], found  # fmt: skip
    # The user's own message is plain text, as typed.
    assert await page.locator("#messages .msg-user .bubble").last.text_content() == text
    await console.shot("chat-markdown")

    # After a reload, the stored reply is drawn as the live one was.
    thread = (await page.evaluate("location.hash")).split("/", 2)[2]
    live = await messages_drawn(page)
    await page.reload()
    await page.wait_for_function(
        "n => document.querySelectorAll('#messages > .msg').length === n",
        arg=len(client.history(thread).messages),
    )
    assert await messages_drawn(page) == live
    assert await page.evaluate("window.pwned ?? null") is None
    console.no_errors()


async def test_an_empty_thread_offers_example_prompts(console: Console) -> None:
    page = console.page
    await console.open()
    welcome = page.locator("#welcome")
    assert "router" in (await welcome.text_content() or "")
    await console.shot("chat-empty")
    example = welcome.locator(".example").first
    prompt = await example.text_content()
    await example.click()
    await page.wait_for_selector(".tl-end")
    assert await page.locator("#messages .msg-user .bubble").text_content() == prompt
    assert await welcome.count() == 0
    console.no_errors()


async def test_stop_cancels_the_run_on_the_server(console: Console) -> None:
    page, client = console.page, console.client
    await console.open()
    await page.fill("#chat-input", " ".join(f"long{i}" for i in range(200)))
    await page.click("#send")
    await page.wait_for_function(
        "() => document.querySelector('.msg-assistant .bubble.streaming')?.textContent.length > 0"
    )
    run_id = await page.locator("#run-head .id").first.get_attribute("data-id")
    await page.click("#stop")
    await page.locator(".tl-end", has_text="run cancelled").wait_for()
    assert await page.locator("#send").is_visible()
    assert client.get_run(run_id or "").state == "cancelled"
    await console.shot("chat-cancelled")
    console.no_errors()


async def test_a_thread_shows_its_runs_with_outcome_usage_and_profile(console: Console) -> None:
    page, client = console.page, console.client
    thread = f"t-{uuid.uuid4().hex[:8]}"
    first = chat(client, thread, "First question")
    second = chat(client, thread, 'use the memory_search tool with {"query": "q"}')
    events: list[str] = []
    page.on("request", lambda r: events.append(r.url) if r.url.endswith("/events") else None)
    await console.open("#/threads")
    await page.locator("#threads-table a", has_text=thread).click()
    rows = page.locator("#runs-table tbody tr")
    await page.wait_for_function(
        "() => [...document.querySelectorAll('#runs-table td.usage')]"
        ".filter(td => td.textContent.includes(' in ')).length === 2"
    )
    assert await rows.evaluate_all("rs => rs.map(r => r.dataset.runId)") == [first, second]
    for run_id in (first, second):
        cells = await page.locator(f'#runs-table tr[data-run-id="{run_id}"] td').all_text_contents()
        assert cells[1] == "succeeded" and cells[2] == "chat", cells
        assert cells[3].startswith("chat_default") and "router on · worker" in cells[3], cells
        # The usage is the run record's (no need of its events, which expire).
        [usage] = client.get_run(run_id).usage
        assert usage.input_tokens > 0 and usage.output_tokens > 0, usage
        assert cells[6].startswith(f"{usage.input_tokens} in · {usage.output_tokens} out"), cells
    assert events == [], events
    history = page.locator("#thread-history > .msg")
    assert await history.count() == len(client.history(thread).messages)
    await console.shot("thread-runs")
    console.no_errors()


async def test_a_job_created_and_triggered_shows_its_run_and_the_memory_it_wrote(
    console: Console,
) -> None:
    page, client = console.page, console.client
    chat(client, f"t-{uuid.uuid4().hex[:8]}", "I love green tea")
    await console.open("#/automation")
    await page.click("#new-job")
    await page.fill("#job-title", "Tea memory")
    await page.select_option("#job-type", "daily")
    await page.fill("#job-local-time", "09:30")
    await page.fill("#job-timezone", "Europe/Berlin")
    await page.fill("#job-prompt", "Find durable facts about the user and save them.")
    await page.check('input[data-tool="memory_write"]')
    await console.shot("job-form")
    await page.click("#save-job")
    await page.wait_for_selector("#trigger-job")
    job_id = (await page.evaluate("location.hash")).split("/", 2)[2]
    job = client.get_job(job_id)
    assert (job.schedule.type, job.schedule.local_time, job.timezone) == (
        "daily",
        "09:30",
        "Europe/Berlin",
    )
    # The next run in the job's own time: 09:30 in Berlin, whatever the browser's zone.
    assert "9:30:00" in (await page.locator(".facts .next-run strong").text_content() or "")

    await page.click("#trigger-job")
    row = page.locator('#job-runs tr[data-state="succeeded"]')
    await row.wait_for(timeout=60_000)
    cells = await row.locator("td").all_text_contents()
    assert cells[2] == "manual" and cells[3] == "1", cells
    [job_run] = client.job_runs(job_id).runs
    run_cell = row.locator("td").nth(6).locator(".id")
    assert job_run.run_id and await run_cell.get_attribute("data-id") == job_run.run_id
    assert await run_cell.get_attribute("title") == job_run.run_id
    await console.shot("job-triggered")

    # The memory it wrote, with where it came from.
    [memory] = client.memories().memories
    await console.page.evaluate("location.hash = '#/memories'")
    card = page.locator(f'.memory[data-memory-id="{memory.id}"]')
    await card.wait_for()
    assert memory.content in (await card.locator(".memory-content").text_content() or "")
    prov = card.locator(".prov-run")
    await prov.locator(".badge", has_text="succeeded").wait_for()
    assert memory.source_run_id == job_run.run_id
    assert await prov.locator(f'.id[data-id="{job_run.run_id}"]').count() == 1
    assert await prov.locator(f'a[href="#/threads/automation%3A{job_id}"]').count() == 1
    await card.get_by_role("button", name="Show 1 source message").click()
    await card.locator(".prov-messages .bubble", has_text="I love green tea").wait_for()
    await console.shot("memory-provenance")

    # Forget it (the button asks once more).
    forget = card.get_by_role("button", name="Forget")
    await forget.click()
    await card.get_by_role("button", name="Forget it for good?").click()
    await card.wait_for(state="detached")
    assert client.memories().memories == []
    console.no_errors()


async def test_a_memory_edited_shows_the_change(console: Console) -> None:
    page, client = console.page, console.client
    await console.open("#/memories")
    await page.locator("#memory-list .empty").wait_for()
    # Saved in the page.
    await page.fill("#memory-new", "User drinks oolong tea")
    await page.select_option("#memory-new-kind", "preference")
    await page.click("#memory-save")
    # The click only starts the request: the card appears once the write has answered.
    await page.locator("#memory-list .memory", has_text="User drinks oolong tea").wait_for()
    [memory] = client.memories().memories
    assert (memory.content, memory.kind, memory.version) == (
        "User drinks oolong tea",
        "preference",
        1,
    )
    card = page.locator(f'.memory[data-memory-id="{memory.id}"]')
    await card.wait_for()

    # Edited in the page, against the version it shows.
    await card.get_by_role("button", name="Edit").click()
    await card.locator(".memory-edit-content").fill("User drinks jasmine tea")
    await card.get_by_role("button", name="Save").click()
    edited = page.locator(f'.memory[data-memory-id="{memory.id}"][data-version="2"]')
    await edited.wait_for()
    assert await edited.locator(".memory-content").text_content() == "User drinks jasmine tea"
    assert "version 2" in (await edited.locator(".memory-meta").text_content() or "")
    now = client.get_memory(memory.id)
    assert (now.content, now.kind, now.version) == ("User drinks jasmine tea", "preference", 2)
    # Its change record, shown after the edit: who changed what.
    update = edited.locator('.change[data-action="update"]')
    await update.wait_for()
    text = await update.text_content() or ""
    assert "you, through the API" in text, text
    assert await update.locator("del").text_content() == "User drinks oolong tea"
    assert await update.locator(".change-content").text_content() == "User drinks jasmine tea"
    actions = await edited.locator(".change").evaluate_all("els => els.map(e => e.dataset.action)")
    assert actions == ["write", "update"], actions
    changes = [c for c in client.memory_changes().changes if c.memory_id == memory.id]
    assert [(c.action, c.actor, c.previous_content, c.content) for c in changes] == [
        ("write", "api", None, "User drinks oolong tea"),
        ("update", "api", "User drinks oolong tea", "User drinks jasmine tea"),
    ]
    await console.shot("memory-edited")

    # Changed elsewhere while the page shows version 2: the API's 409, and nothing written.
    await edited.get_by_role("button", name="Edit").click()
    client.edit_memory(memory.id, content="User drinks green tea", version=2)
    await edited.locator(".memory-edit-content").fill("User drinks black tea")
    await edited.get_by_role("button", name="Save").click()
    text = await console.error_text(f'.memory[data-memory-id="{memory.id}"] .memory-edit-error')
    assert "409 ABORTED" in text and "at version 3, not 2" in text and "request id" in text, text
    after = client.get_memory(memory.id)
    assert (after.content, after.version) == ("User drinks green tea", 3)
    await console.shot("memory-edit-conflict")
    # The page offers the memory as it is now, and its change record shows the other edit.
    await edited.get_by_role("button", name="Show the current version").click()
    current = page.locator(f'.memory[data-memory-id="{memory.id}"][data-version="3"]')
    assert await current.locator(".memory-content").text_content() == "User drinks green tea"
    await current.locator('.change[data-action="update"]').nth(1).wait_for()
    console.no_errors()


async def test_a_job_is_edited_paused_and_resumed(console: Console) -> None:
    page, client = console.page, console.client
    job = client.create_job({
        "title": "Digest", "schedule": {"type": "weekly", "weekday": 1, "localTime": "08:00"},
        "timezone": "Asia/Tokyo", "config": {"prompt": "Summarise my week"},
    })  # fmt: skip
    await console.open(f"#/automation/{job.id}/edit")
    await page.fill("#job-title", "Weekly digest")
    await page.select_option("#job-weekday", "3")
    await page.click("#save-job")
    await page.locator("h1", has_text="Weekly digest").wait_for()
    assert "every Wednesday at 08:00" in (await page.locator(".facts").text_content() or "")
    await page.click("#pause-job")
    await page.locator("h1 .badge", has_text="paused").wait_for()
    assert "paused: none" in (await page.locator(".facts").text_content() or "")
    await page.click("#resume-job")
    await page.locator("h1 .badge", has_text="active").wait_for()
    now = client.get_job(job.id)
    assert (now.title, now.schedule.weekday, now.status, now.version) == (
        "Weekly digest",
        3,
        "active",
        4,
    )
    console.no_errors()


async def test_an_api_error_is_shown_as_the_api_gives_it(console: Console) -> None:
    page, client = console.page, console.client
    await console.open("#/automation/new")
    await page.fill("#job-title", "Broken")
    await page.select_option("#job-type", "cron")
    await page.fill("#job-cron", "every day at noon")
    await page.fill("#job-prompt", "anything")
    await page.click("#save-job")
    text = await console.error_text("#job-form-error")
    assert "400 INVALID_ARGUMENT" in text and "schedule.cron" in text and "request id" in text
    assert await page.locator('.field.invalid[data-for="schedule.cron"]').count() == 1
    await console.shot("job-error")
    assert client.jobs().jobs == []
    console.no_errors()


async def test_a_refused_run_says_it_was_not_started(console: Console) -> None:
    page = console.page
    await console.open()
    await page.fill("#chat-profile", "no_such_profile")
    await page.fill("#chat-input", "hello")
    await page.click("#send")
    text = await console.error_text("#chat-error")
    assert "400 INVALID_ARGUMENT" in text and "forwardedProps.agentmesh.profile" in text, text
    head = await page.locator("#run-head").text_content() or ""
    assert "not started" in head and "nothing of it was stored" in head, head
    assert await page.locator("#send").is_visible()
    console.no_errors()


async def test_the_audit_marks_hidden_messages(console: Console) -> None:
    page, client = console.page, console.client
    chat(client, f"t-{uuid.uuid4().hex[:8]}", "My name is Ada")
    job = client.create_job(memory_job("Extract durable facts now."))
    client.trigger_job(job.id)
    assert wait_for_job_run(client, job.id).state == "succeeded"
    await console.open("#/audit")
    # A user token: no Audit tab (its claims have no admin scope); the page, reached by its
    # address, shows the admin endpoint's 403 as the API says it.
    audit_tab = page.locator('#nav a[data-view="audit"]')
    assert await audit_tab.is_hidden()
    await page.click("#audit-search")
    await page.locator("#audit-error .error", has_text="403 PERMISSION_DENIED").wait_for()
    await page.fill("#admin-token", token("auditor", admin=True))
    await page.select_option("#audit-origin", "automation")
    await page.click("#audit-search")
    await audit_tab.wait_for()  # an admin token given: the tab is offered
    hidden = page.locator("#audit-messages tr.is-hidden", has_text="Extract durable facts now.")
    await hidden.wait_for()
    assert await hidden.locator(".badge", has_text="hidden").count() == 1
    assert (
        await page.locator("#audit-messages tr:not(.is-hidden) .badge", has_text="visible").count()
        >= 1
    )
    await console.shot("audit")
    console.no_errors()


async def test_an_api_key_loses_the_audit_tab_at_its_first_403(
    browser: Browser, slow_suite: Suite
) -> None:
    """The console cannot read an API key's scope (no API tells a caller's roles): it offers
    the Audit tab until the audit answers the key 403."""
    owner = f"key-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=slow_suite.gateway_url, timeout=30) as http:
        made = http.post(
            "/api/v1/admin/api-keys",
            json={"ownerId": owner, "name": "console"},
            headers={"Authorization": f"Bearer {token('ops', admin=True)}"},
        )
        assert made.status_code == 201, made.text
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    c = Console(await context.new_page(), slow_suite, owner)
    try:
        await c.page.goto(f"{slow_suite.gateway_url}/#token={made.json()['key']}")
        tab = c.page.locator('#nav a[data-view="audit"]')
        await tab.wait_for()
        await tab.click()
        await c.page.fill("#audit-owner", owner)
        await c.page.click("#audit-search")
        await c.page.locator("#audit-error .error", has_text="403 PERMISSION_DENIED").wait_for()
        await tab.wait_for(state="hidden")
        c.no_errors()
    finally:
        c.close()
        await context.close()


async def test_the_console_fits_a_narrow_window(browser: Browser, slow_suite: Suite) -> None:
    context = await browser.new_context(viewport={"width": 390, "height": 844}, locale="en-US")
    c = Console(await context.new_page(), slow_suite, f"narrow-{uuid.uuid4().hex[:8]}")
    try:
        c.client.create_memory("User reads long Russian novels on the train", kind="preference")
        await c.open()
        await c.page.wait_for_selector("#welcome")
        await c.shot("narrow-chat-empty")
        await c.page.fill("#chat-input", 'use the memory_search tool with {"query": "x"}')
        await c.page.click("#send")
        await c.page.wait_for_selector(".tl-end")
        thread = (await c.page.evaluate("location.hash")).split("/", 2)[2]
        seen = 0
        for route in (
            "#/chat",
            f"#/chat/{thread}",
            "#/threads",
            f"#/threads/{thread}",
            "#/memories",
            "#/automation",
            "#/automation/new",
            "#/audit",
        ):
            if route != "#/chat":
                await c.page.evaluate("(r) => { location.hash = r }", route)
                await c.page.wait_for_timeout(400)
            # Nothing wider than the window: neither the page nor its view scrolls sideways.
            overflow = await c.page.evaluate(
                "Math.max(...[document.documentElement, document.getElementById('view')]"
                ".map(e => e.scrollWidth - e.clientWidth))"
            )
            assert overflow <= 0, f"{route} is {overflow}px wider than the window"
            # No id broken over lines: each on one line, shown short (a prefix of 15 at most,
            # 8 characters and "…"), whole in its title.
            ids = await c.page.evaluate(IDS_ON_ONE_LINE)
            broken = [i for i in ids if i[2] != 1 or len(i[1]) > 24]
            assert not broken, f"{route}: {broken}"
            seen += len(ids)
            name = route.strip("#/").replace("/", "-").replace(thread, "thread")
            await c.shot("narrow-" + name)
        assert seen >= 10, seen
        c.no_errors()
    finally:
        c.close()
        await context.close()


AXE_SERIOUS = """async () => {
  const result = await axe.run(document, { resultTypes: ["violations"] });
  return result.violations.filter((v) => ["serious", "critical"].includes(v.impact))
    .map((v) => ({ rule: v.id, impact: v.impact,
                   nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ")) }));
}"""


async def test_axe_finds_nothing_serious_on_any_page(browser: Browser, slow_suite: Suite) -> None:
    """axe-core on every page, at desktop and phone width, as an admin with a run, a memory and
    a job to show: 0 serious and 0 critical violations. axe is injected by the test (the page's
    CSP admits only the gateway's own scripts, so this one context bypasses it)."""
    if not AXE.is_file():
        pytest.fail("axe-core is missing: `make tools` installs it (tools/node)")
    context = await browser.new_context(
        viewport={"width": 1400, "height": 900}, locale="en-US", bypass_csp=True
    )
    c = Console(await context.new_page(), slow_suite, f"axe-{uuid.uuid4().hex[:8]}", admin=True)
    page = c.page
    try:
        c.client.create_memory("User drinks green tea", kind="preference")
        job = c.client.create_job(memory_job("Find durable facts."))
        c.client.trigger_job(job.id)
        assert wait_for_job_run(c.client, job.id).state == "succeeded"
        await c.open()
        welcome = await axe_violations(page, "#welcome")
        await page.fill("#chat-input", 'use the memory_search tool with {"query": "**tea**"}')
        await page.click("#send")
        await page.wait_for_selector(".tl-end")
        thread = (await page.evaluate("location.hash")).split("/", 2)[2]
        assert await page.locator('#nav a[data-view="audit"]').is_visible()  # an admin's token
        pages = {
            f"#/chat/{thread}": "#messages .msg-assistant .bubble",
            "#/threads": "#threads-table tbody tr",
            f"#/threads/{thread}": "#runs-table tr[data-run-id]",
            "#/memories": "#memory-list .memory",
            "#/automation": "#jobs-table tbody tr",
            f"#/automation/{job.id}": "#job-runs tbody tr",
            "#/automation/new": "#job-form",
            "#/audit": "#audit-messages tbody tr",
            "#/chat": "#welcome",
        }
        found = {"desktop #/chat (empty)": welcome}
        for width, height in ((1400, 900), (390, 844)):
            await page.set_viewport_size({"width": width, "height": height})
            for route, ready in pages.items():
                if route != f"#/chat/{thread}" or width != 1400:
                    await page.evaluate("(r) => { location.hash = r }", route)
                found[f"{width}px {route}"] = await axe_violations(page, ready)
        await page.evaluate("() => localStorage.clear()")
        await page.goto(slow_suite.gateway_url)
        found["sign in"] = await axe_violations(page, "#token-input")
        serious = {where: v for where, v in found.items() if v}
        assert not serious, serious
        c.no_errors()
    finally:
        c.close()
        await context.close()


async def axe_violations(page: Page, ready: str) -> list[dict[str, Any]]:
    """The serious and critical violations axe-core finds once `ready` shows."""
    await page.wait_for_selector(ready)
    await page.wait_for_timeout(200)  # the rest of the view's requests
    if not await page.evaluate("typeof axe !== 'undefined'"):
        await page.add_script_tag(path=str(AXE))
    found: list[dict[str, Any]] = await page.evaluate(AXE_SERIOUS)
    return found


async def test_signing_in_with_a_bad_token_shows_the_401(
    browser: Browser, slow_suite: Suite
) -> None:
    context = await browser.new_context()
    page = await context.new_page()
    try:
        await page.goto(slow_suite.gateway_url)
        await page.fill("#token-input", "not-a-token")
        await page.click("#sign-in")
        await page.locator(".signin .error", has_text="401 UNAUTHENTICATED").wait_for()
        await page.fill("#token-input", token("signin-user"))
        await page.click("#sign-in")
        await page.wait_for_selector("#chat-input")
        assert await page.locator(".owner").text_content() == "signin-user"
        await page.click("#sign-out")
        await page.wait_for_selector("#token-input")
    finally:
        await context.close()


@pytest.mark.parametrize(("path", "marker"), [("/docs", ".swagger-ui .title"), ("/redoc", "h1")])
async def test_the_api_docs_render_from_the_gateway_alone(
    browser: Browser, slow_suite: Suite, path: str, marker: str
) -> None:
    """Offline docs: the page renders, and whatever it asks of another origin (ReDoc's logo)
    is refused by the browser before it leaves (the page's CSP): nothing is fetched elsewhere."""
    context = await browser.new_context()
    page = await context.new_page()
    origin = slow_suite.gateway_url
    fetched: list[str] = []
    page.on("requestfinished", lambda r: fetched.append(r.url))
    blocked: list[str] = []
    page.on("requestfailed", lambda r: blocked.append(f"{r.url} {r.failure}"))
    try:
        await page.goto(origin + path)
        title = page.locator(marker, has_text="agentmesh gateway").first
        await title.wait_for(timeout=30_000)
        await page.wait_for_load_state("networkidle")
        elsewhere = [u for u in fetched if not u.startswith((origin, f"blob:{origin}", "data:"))]
        assert not elsewhere, elsewhere
        assert all(b.endswith((" csp", "ERR_BLOCKED_BY_CSP")) for b in blocked), blocked
        SHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SHOTS / f"docs{path.replace('/', '-')}.png"))
    finally:
        await context.close()
