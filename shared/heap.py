"""The collector's pauses on a long-running service.

A full (generation 2) collection walks every tracked object, and most of a service's
objects are made at start-up (modules, classes, the app, its clients) and live as long as
the process: under load the gateway paused its event loop 125-220 ms for each (one every
few seconds, bench/shedding.py), holding every stream and every refusal behind it.
`freeze_start_up` moves what exists once a service has started out of the collector's
reach (gc.freeze), so a full collection walks only what was allocated since.
"""

from __future__ import annotations

import gc


def freeze_start_up() -> None:
    """Called once a service has built its parts, before it serves."""
    gc.collect()
    gc.freeze()
