"""`make bench-model`: agentmesh's overhead around a real model, in one run on one machine.

Starts the local model server (services.launcher.LocalModelServer: llama-cpp-python serving
SmolLM2-135M) and the suite pointed at it (embedded), then alternates, --repeats times, the
same request two ways:

- straight to the model server: the chat-completions body the worker sends (the same card,
  messages and offered tools, built by the same provider code), streamed;
- through the gateway: a chat run on a new thread (chat_default: the router decides without
  the model, one tool), streamed as SSE.

Each side streams over one HTTP client kept for the whole benchmark, so every request after
the warm-up reuses its connection: the worker keeps one client (and its connection) to the
model server for the life of the process, so "straight" does too, and a client of the
gateway keeps its connection likewise. (A client per request would put ~20 ms of httpx's
TLS-context setup, for plain http too, into both sides, inflating the model's own time to
first token that the overhead is measured against.)

Greedy decoding (temperature 0, a fixed seed) makes both produce the same tokens. Reported,
as medians: time to the first text, the output's tokens per second (text deltas after the
first, per second), and the ratios: first-text overhead in ms and as a share of the model's
own time to first token, and delivered throughput as a share of the direct one. Writes
results/bench-model-<time>.json and prints a markdown table.

    python -m bench.model [--repeats 7] [--prompt "..."] [--out results] [--shape all|split]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from services.executor.memory_tools import memory_tools
from services.launcher import ALL_SERVICES, LOCAL_CARD, LocalModelServer, Suite, free_port
from shared.messages import user
from shared.model.base import ToolSpec
from shared.model.cards import load_card
from shared.model.openai import OpenAIChatModel

SECRET = "bench-model-secret-of-at-least-thirty-two-bytes"
GREEDY = {"temperature": {"default": 0}, "seed": {"default": 7}}


def _chat_tools() -> list[ToolSpec]:
    """The tools a chat_default run offers (memory_search), as the worker offers them."""
    # Only the tools' specs are read: no memory client is needed.
    tools = {t.name: t for t in memory_tools(None)}  # type: ignore[arg-type]
    t = tools["memory_search"]
    return [ToolSpec(t.name, t.description, t.parameters)]


def direct(http: httpx.Client, server: LocalModelServer, prompt: str) -> tuple[float, float, int]:
    """(seconds to the first text, text deltas per second after it, deltas) straight."""
    card = load_card(LOCAL_CARD, overrides=GREEDY).model_copy(update={"base_url": server.base_url})
    body = OpenAIChatModel(card).request_body([user(prompt)], _chat_tools(), None)
    start = time.perf_counter()
    stamps: list[float] = []
    with http.stream("POST", f"{server.base_url}/chat/completions", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    stamps.append(time.perf_counter())
    return _timing(start, stamps)


def through_gateway(
    http: httpx.Client, suite: Suite, token: str, prompt: str
) -> tuple[float, float, int]:
    """The same through the gateway: a chat run on a new thread."""
    run_id = f"b-{uuid.uuid4().hex[:10]}"
    body = {
        "threadId": f"t-{run_id}",
        "runId": run_id,
        "messages": [{"id": f"m-{run_id}", "role": "user", "content": prompt}],
    }
    start = time.perf_counter()
    stamps: list[float] = []
    last: dict[str, Any] = {}
    with http.stream(
        "POST",
        f"{suite.gateway_url}/api/v1/agent/runs",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
    ) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            last = json.loads(line[6:])
            if last["type"] == "TEXT_MESSAGE_CONTENT":
                stamps.append(time.perf_counter())
    if last.get("type") != "RUN_FINISHED":
        raise RuntimeError(f"the run did not finish: {last}")
    return _timing(start, stamps)


def _timing(start: float, stamps: list[float]) -> tuple[float, float, int]:
    if not stamps:
        raise RuntimeError("no text was streamed")
    span = stamps[-1] - stamps[0]
    rate = (len(stamps) - 1) / span if span > 0 else float("nan")
    return stamps[0] - start, rate, len(stamps)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.model")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--prompt", default="Tell me about the sea in five sentences.")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument(
        "--shape", default="all", help="the suite's processes: all (one, as make run) or split"
    )
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="bench-model-"))
    server = LocalModelServer(free_port(), log_path=tmp / "model-server.log")
    server.start(timeout=180)
    env = {
        **server.env(),
        "AGENTMESH_MODEL_PARAMETERS": json.dumps(GREEDY),
        "AGENTMESH_DATA_DIR": str(tmp / "data"),
        "AGENTMESH_JWT_SECRET": SECRET,
        "AGENTMESH_LOG_LEVEL": "WARNING",
    }
    suite = Suite(
        ports={n: free_port() for n in ALL_SERVICES},
        env=env,
        log_dir=tmp / "logs",
        shape=args.shape,
    )
    try:
        suite.start(timeout=90)
        from services.gateway.auth import issue_token
        from shared.settings import Settings

        token = issue_token(Settings(jwt_secret=SECRET), "bench", ttl_seconds=3600)
        with httpx.Client(timeout=300) as to_model, httpx.Client(timeout=300) as to_gateway:
            # Warm both paths (the model's first call loads its weights into the cache) and
            # open each side's connection.
            direct(to_model, server, args.prompt)
            through_gateway(to_gateway, suite, token, args.prompt)
            rows: dict[str, list[tuple[float, float, int]]] = {"direct": [], "gateway": []}
            for _ in range(args.repeats):
                rows["direct"].append(direct(to_model, server, args.prompt))
                rows["gateway"].append(through_gateway(to_gateway, suite, token, args.prompt))
    finally:
        suite.stop()
        server.stop()

    def med(name: str, i: int) -> float:
        return statistics.median(r[i] for r in rows[name])

    ttft_direct, ttft_gateway = med("direct", 0), med("gateway", 0)
    rate_direct, rate_gateway = med("direct", 1), med("gateway", 1)
    result = {
        "repeats": args.repeats,
        "prompt": args.prompt,
        "first_text_ms": {"direct": ttft_direct * 1000, "gateway": ttft_gateway * 1000},
        "first_text_overhead_ms": (ttft_gateway - ttft_direct) * 1000,
        "first_text_overhead_share": (ttft_gateway - ttft_direct) / ttft_direct,
        "deltas_per_s": {"direct": rate_direct, "gateway": rate_gateway},
        "throughput_ratio": rate_gateway / rate_direct,
        "deltas": {"direct": med("direct", 2), "gateway": med("gateway", 2)},
        "samples": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"bench-model-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(
        f"| path | first text (ms) | text deltas/s |\n|---|---|---|\n"
        f"| straight to the model server | {ttft_direct * 1000:.1f} | {rate_direct:.1f} |\n"
        f"| through the gateway | {ttft_gateway * 1000:.1f} | {rate_gateway:.1f} |\n\n"
        f"first-text overhead {result['first_text_overhead_ms']:.1f} ms "
        f"({result['first_text_overhead_share']:.1%} of the model's own); "
        f"throughput through the gateway {result['throughput_ratio']:.1%} of direct "
        f"(medians of {args.repeats}; {path})"
    )


if __name__ == "__main__":
    main()
