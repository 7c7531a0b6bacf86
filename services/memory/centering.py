"""The vector half's per-script centering (issue 31: quality as memories accumulate).

The embedding model places a text by its language as well as by its meaning: among an
owner's 2,000 memories, a Chinese question's nearest memories are the Chinese ones,
whatever they say, and an English fact asked about in Chinese is found almost never
(bench.memory_quality: cross-language recall@5 0.00 for Chinese questions about English
facts). Centering removes that component: each memory's vector less the mean of the
owner's memories in its script (CJK or not), the question's less the mean of its own
script, compared by cosine. Measured on the vector half alone at 2,000 memories per
owner (docs/benchmarks/memory-quality.md): cross-language recall@5 0.24 -> 0.53, English
0.48 -> 0.50, Chinese 0.56 -> 0.57. An owner whose memories are (nearly) all in one
script gains nothing and loses a little (at 40 memories in one topic the mean is the
topic: recall@5 0.93 -> 0.89), so centering applies only when both scripts hold at least
MIN_PER_SCRIPT memories; and only up to MAX_CENTERED memories, past which PostgreSQL's
search stays on its HNSW index (centering needs every vector of the owner).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from services.memory.core import CJK_PATTERN

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

MIN_PER_SCRIPT = 10
MAX_CENTERED = 20_000

_CJK = re.compile(CJK_PATTERN)


def is_cjk_text(text: str) -> bool:
    """The script a memory or question is centered by: CJK when it holds any CJK character."""
    return _CJK.search(text) is not None


def centers(counts: Mapping[bool, int]) -> bool:
    """Whether an owner with `counts` memories per script (CJK: True) is searched centered."""
    both = min(counts.get(True, 0), counts.get(False, 0))
    return both >= MIN_PER_SCRIPT and sum(counts.values()) <= MAX_CENTERED


def distances(
    matrix: npt.NDArray[np.float32],
    cjk: npt.NDArray[np.bool_],
    query: Sequence[float],
    query_cjk: bool,
) -> npt.NDArray[np.float32]:
    """Cosine distances of the centered query to each centered row of `matrix` (row i in
    the script cjk[i]); the plain cosine distances when `centers` says no."""
    import numpy as np  # lazily, as the SQLite store imports it

    q = np.asarray(query, dtype=np.float32)
    counts = {True: int(cjk.sum()), False: int(len(cjk) - cjk.sum())}
    if not centers(counts):
        return np.asarray(1.0 - matrix @ q, dtype=np.float32)
    means = {s: matrix[cjk == s].mean(axis=0) for s in (True, False)}
    rows = matrix - np.where(cjk[:, None], means[True], means[False])
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    centered = q - means[query_cjk]
    centered /= max(float(np.linalg.norm(centered)), 1e-12)
    return np.asarray(1.0 - rows @ centered, dtype=np.float32)
