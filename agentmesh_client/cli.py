"""`agentmesh`: the gateway's HTTP API from a terminal (installed by `make install`).

    agentmesh token [--sub alice] [--admin]        a development token (source tree only)
    agentmesh run "Hello" [--thread t-1]            stream a run: text on stdout, steps on stderr
    agentmesh threads | history THREAD | runs get RUN | runs cancel RUN | runs events RUN
    agentmesh jobs list | get | create | trigger [--wait] | runs | pause | resume | delete
    agentmesh memories list [--query Q] | memories edit ID [--content C] [--kind K] [--version N]
    agentmesh memories forget ID
    agentmesh register | audit --owner ID | health

The gateway is `--url` (or AGENTMESH_URL, default http://127.0.0.1:8080), the bearer token
`--token` (or AGENTMESH_TOKEN). Readable output by default; `--json` prints what the API
answered (one JSON document; `run` and `runs events`: one event per line).

Exit codes: 0 done; 1 the API refused the request or the run failed (the error is printed as
the API gave it); 2 bad usage; 3 the gateway cannot be reached or is not ready; 4 the token
was refused (401, 403); 130 interrupted (a run being streamed is cancelled first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TextIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import ag_ui.core
from ag_ui.core import EventType

from agentmesh_client.client import DEFAULT_URL, ApiError, Client, GatewayUnreachable, RunStream
from agentmesh_client.models import ApiModel, Job, JobRun, Message

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4
EXIT_INTERRUPTED = 130

# States of a job run that are not over yet (api-endpoints.md, job runs).
_JOB_RUN_GOING = {"pending", "dispatching"}


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


# ---- output ----------------------------------------------------------------------------------


def _when(value: datetime | None, zone: str | None = None) -> str:
    """A time for people: UTC (`2025-01-02 03:04:05Z`), or local in `zone` with its name."""
    if value is None:
        return "-"
    if zone:
        try:
            local = value.astimezone(ZoneInfo(zone))
            return f"{local:%Y-%m-%d %H:%M:%S} {zone}"
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z"


def _table(rows: Sequence[Sequence[str]], header: Sequence[str], out: TextIO) -> None:
    if not rows:
        print("(none)", file=out)
        return
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = (str(c).ljust(w) for c, w in zip(row, widths, strict=True))
        print("  ".join(cells).rstrip(), file=out)


def _dump(value: ApiModel | dict[str, Any] | None, out: TextIO) -> None:
    data = value.to_json() if isinstance(value, ApiModel) else value
    print(json.dumps(data, ensure_ascii=False, indent=2), file=out)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _schedule(job: Job) -> str:
    s = job.schedule
    if s.type == "once":
        return f"once at {s.run_at}"
    if s.type == "daily":
        return f"daily {s.local_time}"
    if s.type == "weekly":
        return f"weekly day {s.weekday} {s.local_time}"
    return f"cron {s.cron!r}"


# ---- runs ------------------------------------------------------------------------------------


class _RunPrinter:
    """One run's events for a terminal: text on `out` as it arrives, everything else on `err`."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self.steps: dict[str, int | None] = {}
        self.started: int | None = None
        self.tools: dict[str, list[str]] = {}
        self.names: dict[str, str] = {}
        self.in_text = False

    def _note(self, line: str) -> None:
        if self.in_text:
            print(file=self.out, flush=True)
            self.in_text = False
        print(line, file=self.err, flush=True)

    def event(self, e: ag_ui.core.BaseEvent) -> None:
        t = e.type
        if t == EventType.RUN_STARTED:
            self.started = e.timestamp
        elif t == EventType.STEP_STARTED:
            assert isinstance(e, ag_ui.core.StepStartedEvent)
            self.steps[e.step_name] = e.timestamp
            self._note(f"[{e.step_name}] started")
        elif t == EventType.STEP_FINISHED:
            assert isinstance(e, ag_ui.core.StepFinishedEvent)
            began = self.steps.get(e.step_name)
            took = f" in {e.timestamp - began} ms" if began and e.timestamp else ""
            self._note(f"[{e.step_name}] done{took}")
        elif t == EventType.TEXT_MESSAGE_CONTENT:
            assert isinstance(e, ag_ui.core.TextMessageContentEvent)
            print(e.delta, end="", file=self.out, flush=True)
            self.in_text = True
        elif t == EventType.TEXT_MESSAGE_END and self.in_text:
            print(file=self.out, flush=True)
            self.in_text = False
        elif t == EventType.TOOL_CALL_START:
            assert isinstance(e, ag_ui.core.ToolCallStartEvent)
            self.names[e.tool_call_id] = e.tool_call_name
            self.tools[e.tool_call_id] = []
        elif t == EventType.TOOL_CALL_ARGS:
            assert isinstance(e, ag_ui.core.ToolCallArgsEvent)
            self.tools.setdefault(e.tool_call_id, []).append(e.delta)
        elif t == EventType.TOOL_CALL_END:
            assert isinstance(e, ag_ui.core.ToolCallEndEvent)
            args = "".join(self.tools.get(e.tool_call_id, []))
            self._note(f"[tool] {self.names.get(e.tool_call_id, '?')} {_short(args)}")
        elif t == EventType.TOOL_CALL_RESULT:
            assert isinstance(e, ag_ui.core.ToolCallResultEvent)
            name = self.names.get(e.tool_call_id, "?")
            content = (
                e.content
                if isinstance(e.content, str)
                else json.dumps(
                    [p.model_dump(mode="json", by_alias=True, exclude_none=True) for p in e.content]
                )
            )
            self._note(f"[tool] {name} -> {_short(content)}")
        elif t == EventType.REASONING_MESSAGE_CONTENT:
            assert isinstance(e, ag_ui.core.ReasoningMessageContentEvent)
            self._note(f"[thinking] {_short(e.delta)}")
        elif t == EventType.CUSTOM:
            assert isinstance(e, ag_ui.core.CustomEvent)
            self._note(f"[{e.name}] {json.dumps(e.value, ensure_ascii=False)}")
        elif t == EventType.RUN_FINISHED:
            assert isinstance(e, ag_ui.core.RunFinishedEvent)
            outcome = e.outcome.type if e.outcome is not None else "success"
            line = f"[run] {outcome}"
            if self.started and e.timestamp:
                line += f" in {e.timestamp - self.started} ms"
            for u in e.usage or []:
                estimated = " (estimated)" if (u.model_extra or {}).get("estimated") else ""
                line += f", tokens {u.input_tokens} in / {u.output_tokens} out{estimated}"
            self._note(line)
        elif t == EventType.RUN_ERROR:
            assert isinstance(e, ag_ui.core.RunErrorEvent)
            self._note(f"[run] failed: {e.code or 'RUN_ERROR'}: {e.message}")


def _follow(client: Client, stream: RunStream, args: argparse.Namespace) -> int:
    printer = _RunPrinter(sys.stdout, sys.stderr)
    try:
        for event in stream:
            if args.json:
                data = event.model_dump(mode="json", by_alias=True, exclude_none=True)
                print(json.dumps(data, ensure_ascii=False), flush=True)
            else:
                printer.event(event)
    except KeyboardInterrupt:
        # Ctrl-C stops the run itself, not only this terminal's view of it.
        stream.close()
        try:
            result = client.cancel_run(stream.run_id)
            print(f"\n[run] {stream.run_id} cancelled: state {result.state}", file=sys.stderr)
        except ApiError as err:
            print(f"\n[run] {stream.run_id} not cancelled: {err}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not args.json:
        print(f"[run] {stream.run_id} on thread {stream.thread_id or '-'}", file=sys.stderr)
    terminal = stream.terminal
    if terminal is None:
        print("error: the stream ended before the run's last event", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if terminal.type == EventType.RUN_ERROR else EXIT_OK


def cmd_run(client: Client, args: argparse.Namespace) -> int:
    thread = args.thread or f"t-{uuid.uuid4().hex[:12]}"
    stream = client.start_run(
        thread,
        args.text,
        run_id=args.run_id,
        profile=args.profile,
        multitask_strategy=args.strategy,
        timezone=args.timezone,
    )
    return _follow(client, stream, args)


def cmd_runs(client: Client, args: argparse.Namespace) -> int:
    if args.action == "events":
        return _follow(client, client.resume_run(args.run_id, after=args.after), args)
    if args.action == "cancel":
        result = client.cancel_run(args.run_id)
        if args.json:
            _dump(result, sys.stdout)
        else:
            print(f"{result.run_id}: {result.state}")
        return EXIT_OK
    run = client.get_run(args.run_id)
    if args.json:
        _dump(run, sys.stdout)
        return EXIT_OK
    profile = run.profile
    rows = [
        ("run", run.id),
        ("thread", run.thread_id),
        ("state", run.state),
        ("origin", run.origin or "-"),
        ("profile", (profile.name or "-") if profile else "-"),
        ("router", ("on" if profile.enable_router else "off") if profile else "-"),
        ("executor", (profile.executor or "-") if profile else "-"),
        ("created", _when(run.create_time)),
        ("started", _when(run.start_time)),
        ("finished", _when(run.finish_time)),
    ]
    if run.error:
        rows.append(("error", f"{run.error.code}: {run.error.message}"))
    if run.cancel_requested:
        rows.append(("cancel", "requested"))
    if run.rolled_back:
        rows.append(("rolled back", "yes"))
    for u in run.usage:
        estimated = " (estimated)" if u.estimated else ""
        rows.append(("tokens", f"{u.input_tokens} in / {u.output_tokens} out{estimated}"))
    for key, value in rows:
        print(f"{key:<12}{value}")
    return EXIT_OK


# ---- threads, history, audit -----------------------------------------------------------------


def _more(token: str | None) -> None:
    if token:
        print(f"(more: --page-token {token})", file=sys.stderr)


def cmd_threads(client: Client, args: argparse.Namespace) -> int:
    page = client.threads(page_size=args.page_size, page_token=args.page_token)
    if args.json:
        _dump(page, sys.stdout)
        return EXIT_OK
    rows = [
        (t.id, t.runtime_mode, str(t.message_count), _when(t.update_time)) for t in page.threads
    ]
    _table(rows, ("THREAD", "MODE", "MESSAGES", "UPDATED"), sys.stdout)
    _more(page.next_page_token)
    return EXIT_OK


def _message_line(m: Message) -> str:
    who = m.role
    if m.metadata.hidden_from_user:
        who += " (hidden)"
    if m.tool_calls:
        calls = ", ".join(
            f"{c.function.name}({_short(c.function.arguments, 80)})" for c in m.tool_calls
        )
        body = f"calls {calls}" + (f" {_short(m.text)}" if m.text else "")
    elif m.role == "tool":
        body = ("error: " if m.error else "") + _short(m.text)
    else:
        body = m.text
    return f"{_when(m.create_time)}  {who}: {body}"


def cmd_history(client: Client, args: argparse.Namespace) -> int:
    page = client.history(
        args.thread, page_size=args.page_size, page_token=args.page_token, direction=args.direction
    )
    if args.json:
        _dump(page, sys.stdout)
        return EXIT_OK
    for m in page.messages:
        print(_message_line(m))
    if not page.messages:
        print("(no messages)")
    _more(page.next_page_token)
    return EXIT_OK


def cmd_audit(client: Client, args: argparse.Namespace) -> int:
    page = client.audit(
        args.owner,
        origin=args.origin,
        executor=args.executor,
        execution_profile_name=args.profile,
        thread_id=args.thread,
        start_time=args.start,
        end_time=args.end,
        page_size=args.page_size,
        page_token=args.page_token,
    )
    if args.json:
        _dump(page, sys.stdout)
        return EXIT_OK
    for m in page.messages:
        where = f"[{m.thread_id} {m.metadata.origin or '-'}/{m.metadata.executor or '-'}]"
        print(f"{where} {_message_line(m)}")
    for d in page.tool_denials:
        print(
            f"[{d.thread_id} denied] {_when(d.create_time)}  {d.tool_name}: {d.reason} "
            f"(arguments sha256 {d.arguments_sha256[:12]}…)"
        )
    if not page.messages and not page.tool_denials:
        print("(nothing)")
    _more(page.next_page_token)
    return EXIT_OK


# ---- memories --------------------------------------------------------------------------------


def cmd_memories(client: Client, args: argparse.Namespace) -> int:
    if args.action == "forget":
        client.forget_memory(args.memory_id)
        if not args.json:
            print(f"forgot {args.memory_id}")
        return EXIT_OK
    if args.action == "edit":
        if args.content is None and args.kind is None:
            raise _Usage("memories edit: give --content or --kind (or both)")
        memory = client.edit_memory(
            args.memory_id, content=args.content, kind=args.kind, version=args.version
        )
        if args.json:
            _dump(memory, sys.stdout)
        else:
            print(f"{memory.id}: version {memory.version}, {memory.kind or '-'}: {memory.content}")
        return EXIT_OK
    query = getattr(args, "query", None)
    page = client.memories(query=query, page_size=args.page_size, page_token=args.page_token)
    if args.json:
        _dump(page, sys.stdout)
        return EXIT_OK
    rows = [
        (
            m.id,
            m.kind or "-",
            _short(m.content, 60),
            m.source_run_id or "-",
            _when(m.update_time),
        )
        for m in page.memories
    ]
    _table(rows, ("MEMORY", "KIND", "CONTENT", "SOURCE RUN", "UPDATED"), sys.stdout)
    _more(page.next_page_token)
    return EXIT_OK


# ---- jobs ------------------------------------------------------------------------------------


def _job_body(args: argparse.Namespace) -> dict[str, Any]:
    """The job JSON of `jobs create` (api-endpoints.md "Job JSON"): a file, or the options."""
    if args.file:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        try:
            loaded: object = json.loads(text)
        except ValueError as err:
            raise _Usage(f"--file: not JSON: {err}") from None
        if not isinstance(loaded, dict):
            raise _Usage("--file: must hold a JSON object (a job)")
        return loaded
    schedules = [s for s in ("at", "daily", "weekly", "cron") if getattr(args, s)]
    if len(schedules) != 1 or not args.title or not args.prompt:
        raise _Usage(
            "jobs create needs --title, --prompt and one of --at, --daily, --weekly, --cron "
            "(or --file with the job JSON)"
        )
    kind = schedules[0]
    schedule: dict[str, Any]
    if kind == "at":
        schedule = {"type": "once", "runAt": args.at}
    elif kind == "daily":
        schedule = {"type": "daily", "localTime": args.daily}
    elif kind == "weekly":
        weekday, local_time = args.weekly
        if not weekday.isdigit():
            raise _Usage("--weekly: the weekday is a number, 1 (Monday) to 7 (Sunday)")
        schedule = {"type": "weekly", "weekday": int(weekday), "localTime": local_time}
    else:
        schedule = {"type": "cron", "cron": args.cron}
    body: dict[str, Any] = {
        "title": args.title,
        "schedule": schedule,
        "config": {"prompt": args.prompt, "tools": args.tool or []},
    }
    if args.timezone:
        body["timezone"] = args.timezone
    if args.catch_up:
        body["catchUpPolicy"] = args.catch_up
    if args.jitter is not None:
        body["jitterSeconds"] = args.jitter
    return body


def _print_job(job: Job) -> None:
    rows = [
        ("job", job.id),
        ("title", job.title),
        ("status", job.status),
        ("schedule", _schedule(job)),
        ("timezone", job.timezone),
        ("next run", _when(job.next_run_time, job.timezone)),
        ("last run", _when(job.last_run_time, job.timezone)),
        ("tools", ", ".join(job.config.tools) or "-"),
        ("profile", (job.execution_profile.name or "-") if job.execution_profile else "-"),
        ("version", str(job.version)),
    ]
    for key, value in rows:
        print(f"{key:<10}{value}")


def _print_job_runs(runs: Iterable[JobRun], zone: str | None) -> None:
    rows = []
    for r in runs:
        last_error = _short(r.errors[-1].error, 60) if r.errors else "-"
        rows.append(
            (r.id, r.state, r.trigger, str(r.attempt), _when(r.scheduled_slot, zone),
             r.run_id or "-", last_error)
        )  # fmt: skip
    header = ("JOB RUN", "STATE", "TRIGGER", "ATTEMPT", "SLOT", "RUN", "LAST ERROR")
    _table(rows, header, sys.stdout)


def _wait_for(client: Client, job_id: str, job_run_id: str, timeout: float) -> JobRun:
    deadline = time.monotonic() + timeout
    while True:
        for r in client.job_runs(job_id).runs:
            over = r.state not in _JOB_RUN_GOING
            if r.id == job_run_id and (over or time.monotonic() > deadline):
                return r
        if time.monotonic() > deadline:
            raise _Usage(f"job run {job_run_id} is not in the job's runs")
        time.sleep(0.5)


def cmd_jobs(client: Client, args: argparse.Namespace) -> int:
    action = args.action
    if action == "list":
        page = client.jobs(page_size=args.page_size, page_token=args.page_token)
        if args.json:
            _dump(page, sys.stdout)
            return EXIT_OK
        rows = [
            (j.id, _short(j.title, 40), j.status, _schedule(j), _when(j.next_run_time, j.timezone))
            for j in page.jobs
        ]
        _table(rows, ("JOB", "TITLE", "STATUS", "SCHEDULE", "NEXT RUN (job's time)"), sys.stdout)
        _more(page.next_page_token)
        return EXIT_OK
    if action == "runs":
        job = client.get_job(args.job_id)
        runs = client.job_runs(args.job_id, page_size=args.page_size, page_token=args.page_token)
        if args.json:
            _dump(runs, sys.stdout)
            return EXIT_OK
        _print_job_runs(runs.runs, job.timezone)
        for r in runs.runs:
            for e in r.errors:
                print(f"  {r.id} attempt {e.attempt} at {_when(e.time)}: {e.error}")
        _more(runs.next_page_token)
        return EXIT_OK
    if action == "delete":
        client.delete_job(args.job_id)
        if not args.json:
            print(f"deleted {args.job_id}")
        return EXIT_OK
    if action == "trigger":
        run = client.trigger_job(args.job_id)
        if args.wait:
            run = _wait_for(client, args.job_id, run.id, args.wait)
        if args.json:
            _dump(run, sys.stdout)
        else:
            _print_job_runs([run], client.get_job(args.job_id).timezone)
            for e in run.errors:
                print(f"  attempt {e.attempt} at {_when(e.time)}: {e.error}")
        return EXIT_FAILED if args.wait and run.state != "succeeded" else EXIT_OK
    actions: dict[str, Callable[[], Job]] = {
        "get": lambda: client.get_job(args.job_id),
        "pause": lambda: client.pause_job(args.job_id),
        "resume": lambda: client.resume_job(args.job_id),
        "create": lambda: client.create_job(_job_body(args), idempotency_key=args.idempotency_key),
    }
    job = actions[action]()
    if args.json:
        _dump(job, sys.stdout)
    else:
        _print_job(job)
    return EXIT_OK


# ---- the rest --------------------------------------------------------------------------------


def cmd_register(client: Client, args: argparse.Namespace) -> int:
    reg = client.register(args.timezone)
    if args.json:
        _dump(reg, sys.stdout)
        return EXIT_OK
    print(f"registered {reg.owner_id}; default jobs:")
    for job in reg.jobs:
        print(f"  {job.id}  {job.title}  {_schedule(job)} {job.timezone}")
    return EXIT_OK


def cmd_health(client: Client, args: argparse.Namespace) -> int:
    alive = client.health()
    try:
        ready: dict[str, Any] = client.ready()
        code = EXIT_OK
    except ApiError as err:
        if err.status != 503:
            raise
        ready = {"status": "not ready", "error": err.error}
        code = EXIT_UNREACHABLE
    if args.json:
        _dump({"healthz": alive, "readyz": ready}, sys.stdout)
        return code
    print(f"gateway: {alive.get('status')}")
    if code == EXIT_OK:
        print("services: ready")
    else:
        print("services: NOT ready")
        for d in ready["error"].get("details", []):
            print(f"  {d.get('field')}: {d.get('description')}")
    return code


class _Usage(Exception):
    """A command line the CLI cannot turn into a request (exit 2)."""


def _source_tree() -> Path | None:
    """The agentmesh source tree this package sits in (an editable install), if any."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "services" / "gateway" / "auth.py").is_file() else None


def cmd_token(args: argparse.Namespace) -> int:
    # Development tokens are signed by the gateway's own rule with AGENTMESH_JWT_SECRET: the
    # code that issues them lives in the source tree, not in this client.
    root = _source_tree()
    if root is None:
        raise _Usage("token needs the agentmesh source tree (tokens come from your IdP otherwise)")
    for path in (str(root), str(root / "protos")):
        if path not in sys.path:
            sys.path.append(path)
    from services.gateway.auth import issue_token
    from shared.settings import get_settings

    try:
        print(issue_token(get_settings(), args.sub, admin=args.admin, ttl_seconds=args.ttl))
    except ValueError as err:
        raise _Usage(f"--sub: {err}") from None
    return EXIT_OK


# ---- arguments -------------------------------------------------------------------------------


def _common_options(parser: argparse.ArgumentParser, default: Any) -> argparse.ArgumentParser:
    parser.add_argument(
        "--url", default=default, help=f"gateway (AGENTMESH_URL, default {DEFAULT_URL})"
    )
    parser.add_argument("--token", default=default, help="bearer token (AGENTMESH_TOKEN)")
    parser.add_argument(
        "--json", action="store_true", default=default or False, help="print the API's JSON"
    )
    return parser


def _parser() -> argparse.ArgumentParser:
    # The common options go before or after the command: the subcommands' copies default to
    # SUPPRESS, so they never overwrite what was given before the command.
    top = _common_options(argparse.ArgumentParser(add_help=False), None)
    common = _common_options(argparse.ArgumentParser(add_help=False), argparse.SUPPRESS)
    paged = argparse.ArgumentParser(add_help=False)
    paged.add_argument("--page-size", type=int, default=0)
    paged.add_argument("--page-token", default=None)

    parser = argparse.ArgumentParser(
        prog="agentmesh",
        description="agentmesh from a terminal: runs, threads, jobs, memories.",
        epilog="exit codes: 0 done, 1 refused or failed, 2 usage, 3 unreachable or not ready, "
        "4 token refused, 130 interrupted",
        parents=[top],
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("token", help="print a development bearer token (source tree)")
    p.add_argument("--sub", default="dev-user", help="the owner id (default dev-user)")
    p.add_argument("--admin", action="store_true", help="add the admin scope")
    p.add_argument("--ttl", type=int, default=24 * 3600, help="lifetime in seconds")

    p = sub.add_parser("run", parents=[common], help="stream a run (text: stdout, steps: stderr)")
    p.add_argument("text", help="the user message")
    p.add_argument("--thread", help="thread id (default: a new thread)")
    p.add_argument("--run-id", help="run id (default: a new one)")
    p.add_argument("--profile", help="execution profile (a worker profile)")
    p.add_argument("--strategy", choices=("enqueue", "reject", "interrupt", "rollback"))
    p.add_argument("--timezone", help="IANA time zone (X-Timezone)")

    p = sub.add_parser("runs", parents=[common], help="one run: get, cancel, events")
    p.add_argument("action", choices=("get", "cancel", "events"))
    p.add_argument("run_id")
    p.add_argument("--after", type=int, help="events: after this sequence number")

    sub.add_parser("threads", parents=[common, paged], help="your threads")
    p = sub.add_parser("history", parents=[common, paged], help="a thread's messages")
    p.add_argument("thread")
    p.add_argument("--direction", choices=("forward", "backward"))

    p = sub.add_parser("jobs", parents=[common], help="automation jobs")
    jobs = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    jobs.add_parser("list", parents=[common, paged], help="your jobs")
    for name in ("get", "pause", "resume", "delete"):
        jobs.add_parser(name, parents=[common], help=f"{name} a job").add_argument("job_id")
    p = jobs.add_parser("trigger", parents=[common], help="run a job now")
    p.add_argument("job_id")
    p.add_argument("--wait", type=float, metavar="SECONDS", help="wait until the run is over")
    p = jobs.add_parser("runs", parents=[common, paged], help="a job's runs, attempts and errors")
    p.add_argument("job_id")
    p = jobs.add_parser("create", parents=[common], help="create a job")
    p.add_argument("--file", help="the job JSON (api-endpoints.md); - reads stdin")
    p.add_argument("--title")
    p.add_argument("--prompt")
    p.add_argument("--at", metavar="RFC3339", help="once, at this instant (with an offset)")
    p.add_argument("--daily", metavar="HH:MM")
    p.add_argument("--weekly", nargs=2, metavar=("WEEKDAY", "HH:MM"), help="1 (Monday) to 7")
    p.add_argument("--cron", metavar="EXPR")
    p.add_argument("--timezone")
    p.add_argument("--tool", action="append", help="memory_write, memory_forget, memory_search")
    p.add_argument("--catch-up", choices=("latest", "skip", "all"))
    p.add_argument("--jitter", type=int, metavar="SECONDS")
    p.add_argument("--idempotency-key")

    p = sub.add_parser("memories", parents=[common], help="your memories")
    mem = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = mem.add_parser("list", parents=[common, paged], help="list, or search with --query")
    p.add_argument("--query")
    p = mem.add_parser("edit", parents=[common], help="edit one's content and/or kind")
    p.add_argument("memory_id")
    p.add_argument("--content")
    p.add_argument("--kind", choices=("fact", "preference", "dislike", "name", "place"))
    p.add_argument("--version", type=int, help="only if still at this version (else refused)")
    mem.add_parser("forget", parents=[common], help="forget one").add_argument("memory_id")

    p = sub.add_parser("register", parents=[common], help="register yourself (default jobs)")
    p.add_argument("--timezone")

    p = sub.add_parser("audit", parents=[common, paged], help="an owner's audit (admin token)")
    p.add_argument("--owner", required=True)
    p.add_argument("--origin", choices=("chat", "automation"))
    p.add_argument("--executor", choices=("worker", "memory"))
    p.add_argument("--profile")
    p.add_argument("--thread")
    p.add_argument("--start", metavar="RFC3339")
    p.add_argument("--end", metavar="RFC3339")

    sub.add_parser("health", parents=[common], help="is the gateway alive and ready")
    return parser


_COMMANDS: dict[str, Callable[[Client, argparse.Namespace], int]] = {
    "run": cmd_run,
    "runs": cmd_runs,
    "threads": cmd_threads,
    "history": cmd_history,
    "audit": cmd_audit,
    "memories": cmd_memories,
    "jobs": cmd_jobs,
    "register": cmd_register,
    "health": cmd_health,
}


def _fail(message: str, code: int) -> NoReturn:
    print(f"agentmesh: {message}", file=sys.stderr)
    raise _Exit(code)


def _api_error(err: ApiError, as_json: bool) -> int:
    if as_json:
        body = {"status": err.status, "error": err.error}
        print(json.dumps(body, ensure_ascii=False), file=sys.stderr)
    else:
        line = f"error: {err.status} {err.code}: {err.message}"
        fields = ", ".join(f"{d.get('field')}: {d.get('description')}" for d in err.details)
        print(line + (f" [{fields}]" if fields else ""), file=sys.stderr)
        if err.request_id:
            print(f"request id: {err.request_id}", file=sys.stderr)
    return EXIT_AUTH if err.status in (401, 403) else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "token":
            return cmd_token(args)
        url = getattr(args, "url", None) or os.environ.get("AGENTMESH_URL") or DEFAULT_URL
        token = getattr(args, "token", None) or os.environ.get("AGENTMESH_TOKEN")
        if not token and args.command != "health":
            _fail("no token: pass --token or set AGENTMESH_TOKEN (agentmesh token)", EXIT_AUTH)
        with Client(url, token) as client:
            return _COMMANDS[args.command](client, args)
    except _Exit as done:
        return done.code
    except _Usage as err:
        print(f"agentmesh: {err}", file=sys.stderr)
        return EXIT_USAGE
    except ApiError as err:
        return _api_error(err, args.json)
    except GatewayUnreachable as err:
        print(f"agentmesh: {err}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `agentmesh threads | head`: the reader went away; nothing more to say.
        return EXIT_OK


def entry() -> None:
    sys.exit(main())
