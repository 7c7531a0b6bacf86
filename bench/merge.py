"""Benchmark: the streaming merge is linear in the size of a tool-argument stream.

Streams a tool call's JSON arguments of 0.25, 0.5, 1 and 2 MB through MessageAccumulator in
1-byte and 16-byte chunks, and prints the time of each size and its ratio to the previous
size (linear: ~2.0 per doubling; quadratic: ~4.0). Times are CPU seconds of this process,
the best of 5 runs (25 for the short 16-byte runs), so other load on the machine does not
blur the ratios.

    PYTHONPATH=.:protos .venv/bin/python -m bench.merge
"""

from __future__ import annotations

import gc
import json
import time

from shared.messages import ToolCallBlock
from shared.model.base import ChatResponse
from shared.model.merge import MessageAccumulator

SIZES_MB = (0.25, 0.5, 1.0, 2.0)
CHUNK_SIZES = (1, 16)


def arguments(size: int) -> str:
    """A JSON object of about `size` bytes (ASCII, so characters = bytes)."""
    filler = "x" * max(0, size - len('{"data": ""}'))
    return json.dumps({"data": filler})


def chunks(text: str, step: int) -> list[ChatResponse]:
    """The stream, built before timing. One-byte chunks reuse one object per distinct byte so
    that 2 M chunks fit in memory; the accumulator cannot tell."""
    if step == 1:
        pool = {
            c: ChatResponse(content=(ToolCallBlock(id="call_1", name="", input=c),))
            for c in set(text)
        }
        stream = [pool[c] for c in text]
    else:
        stream = [
            ChatResponse(content=(ToolCallBlock(id="call_1", name="", input=text[i : i + step]),))
            for i in range(0, len(text), step)
        ]
    stream.insert(0, ChatResponse(content=(ToolCallBlock(id="call_1", name="write_file"),)))
    stream.append(ChatResponse(is_last=True, finished_reason="tool_calls"))
    return stream


def merge_seconds(stream: list[ChatResponse], expected: str) -> float:
    # The cyclic GC would rescan the prebuilt stream (millions of objects) while the
    # accumulator allocates: noise from the benchmark's own fixture, not the merge.
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        acc = MessageAccumulator()
        for chunk in stream:
            acc.add(chunk)
        [call] = acc.message().tool_calls
        elapsed = time.process_time() - start
    finally:
        gc.enable()
    assert call.input == expected
    call.arguments()  # parsed once, at the end; outside the timing
    return elapsed


def main() -> None:
    print(f"{'chunk':>6} {'MB':>5} {'chunks':>9} {'cpu s':>8} {'ratio':>6}")
    for step in CHUNK_SIZES:
        previous = None
        for mb in SIZES_MB:
            text = arguments(int(mb * 1024 * 1024))
            stream = chunks(text, step)
            repeats = 5 if step == 1 else 25  # short runs: more tries for a stable best
            seconds = min(merge_seconds(stream, text) for _ in range(repeats))
            ratio = f"{seconds / previous:6.2f}" if previous else "     -"
            print(f"{step:>5}B {mb:>5} {len(stream):>9} {seconds:>8.3f} {ratio}")
            previous = seconds


if __name__ == "__main__":
    main()
